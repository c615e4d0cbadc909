"""Spark's S3A connector for the tests and harnesses: the Spark conf that makes ``s3a://``
paths work against an S3-compatible server, such as moto's (:mod:`iqp_dev.s3`).

pyspark bundles Hadoop's client but not hadoop-aws nor the AWS SDK it needs.
``scripts/setup_spark_jars.sh`` fetches the jars pinned in ``scripts/s3a-jars.txt`` into
``var/jars/s3a/``; :func:`s3a_spark_conf` puts exactly those on the session's classpath.

Nothing in the conf is there for moto's sake: Hadoop 3.5.0 already keeps the SDK from adding
the request checksums (aws-chunked CRC32 trailers) that S3-compatible servers often refuse
(``fs.s3a.checksum.generation`` defaults to false), and moto answers ETags and ranged GETs as
S3 does, for change detection and for the default ``analytics`` input stream.

With moto's server of :mod:`iqp_dev.s3` running, pass its endpoint and the credentials it
was started with.
"""

from __future__ import annotations

from pathlib import Path

#: The repository root: the jars and their list live beside this package.
ROOT = Path(__file__).resolve().parents[1]
#: Where scripts/setup_spark_jars.sh puts the jars, relative to the repository root.
S3A_JARS_DIR = Path("var/jars/s3a")
#: The pinned list the script fetches, relative to the repository root.
S3A_JARS_LIST = Path("scripts/s3a-jars.txt")


def s3a_jars(root: str | Path = ROOT) -> list[Path]:
    """The jars pinned in scripts/s3a-jars.txt, in var/jars/s3a/ under ``root``: the list's,
    not whatever the directory holds. Raises FileNotFoundError naming the set-up script when
    any is missing."""
    root = Path(root)
    jars = []
    for line in (root / S3A_JARS_LIST).read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        _group, artifact, version = line.split()[0].split(":")
        jars.append(root / S3A_JARS_DIR / f"{artifact}-{version}.jar")
    missing = [j.name for j in jars if not j.is_file()]
    if missing:
        raise FileNotFoundError(
            f"{len(missing)} of the {len(jars)} S3A jars are missing from {root / S3A_JARS_DIR} "
            f"(e.g. {missing[0]}): run scripts/setup_spark_jars.sh to fetch them")
    return jars


def s3a_spark_conf(endpoint_url: str, access_key: str, secret_key: str, *,
                   root: str | Path = ROOT) -> dict[str, str]:
    """The Spark conf for ``s3a://`` paths on the S3-compatible server at ``endpoint_url``
    (``http://host:port``), with these credentials. Set it before the session (or the
    spark-submit) starts: ``spark.jars`` is read once, at start."""
    s3a = "spark.hadoop.fs.s3a."
    return {
        "spark.jars": ",".join(str(j) for j in s3a_jars(root)),
        s3a + "endpoint": endpoint_url,
        # The SDK signs with a region; moto takes any. Named, so that Hadoop need not guess
        # one for a non-AWS endpoint nor look in the environment or the instance metadata.
        s3a + "endpoint.region": "us-east-1",
        # Buckets as the path's first element (http://host:port/bucket/key). The default,
        # virtual-host style, asks for http://bucket.host:port/key: the SDK falls back to
        # paths by itself for an IP address, but with a host name (localhost, a compose
        # service's name) the bucket's name resolves nowhere and every request fails.
        s3a + "path.style.access": "true",
        # Only these keys: the default chain would go on to the environment (AWS_*) and the
        # instance metadata service, and could quietly sign with other credentials.
        s3a + "aws.credentials.provider": "org.apache.hadoop.fs.s3a.SimpleAWSCredentialsProvider",
        s3a + "access.key": access_key,
        s3a + "secret.key": secret_key,
        # TLS as the URL says: Hadoop reads this for an endpoint given without a scheme.
        s3a + "connection.ssl.enabled": str(endpoint_url.startswith("https://")).lower(),
    }
