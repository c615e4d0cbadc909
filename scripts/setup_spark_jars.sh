#!/usr/bin/env bash
# Fetches Spark's S3A connector (hadoop-aws and the AWS SDK v2 modules it needs) into
# var/jars/s3a/: the jars pinned in scripts/s3a-jars.txt, from Maven Central, each checked
# against its pinned sha1 before it is kept. pyspark ships without them; iqp_dev/s3a.py puts
# them on a session's classpath (spark.jars) for s3a:// paths.
# Idempotent: a jar already there with the pinned sha1 is not fetched again, and a jar there
# that the list no longer names is removed (spark.jars takes the list, but a stale jar would
# confuse whoever looks). Prints what it fetches. Called by scripts/test.sh.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
LIST="$ROOT/scripts/s3a-jars.txt"
DEST="$ROOT/var/jars/s3a"
REPO="https://repo1.maven.org/maven2"

fetch() {  # fetch URL FILE
    if command -v curl >/dev/null 2>&1; then
        curl -fsSL --retry 3 -o "$2" "$1"
    else
        python3 -c 'import sys, urllib.request; urllib.request.urlretrieve(sys.argv[1], sys.argv[2])' "$1" "$2"
    fi
}

sha1_of() { sha1sum "$1" | cut -d' ' -f1; }

mkdir -p "$DEST"
declare -A wanted=()
fetched=0
while read -r coord sha1 _; do
    case "$coord" in ''|'#'*) continue ;; esac
    IFS=: read -r group artifact version <<<"$coord"
    jar="$artifact-$version.jar"
    wanted[$jar]=1
    if [ -f "$DEST/$jar" ] && [ "$(sha1_of "$DEST/$jar")" = "$sha1" ]; then
        continue
    fi
    url="$REPO/${group//.//}/$artifact/$version/$jar"
    echo "setup_spark_jars: fetching $url"
    # Into a temp name first: an interrupted or wrong download never passes for the jar.
    fetch "$url" "$DEST/$jar.part"
    got=$(sha1_of "$DEST/$jar.part")
    if [ "$got" != "$sha1" ]; then
        rm -f "$DEST/$jar.part"
        echo "error: $jar has sha1 $got, not the pinned $sha1 ($LIST)" >&2
        exit 3
    fi
    mv "$DEST/$jar.part" "$DEST/$jar"
    fetched=$((fetched + 1))
done <"$LIST"

for f in "$DEST"/*; do
    [ -e "$f" ] || continue
    name=$(basename "$f")
    if [ -z "${wanted[$name]:-}" ]; then
        echo "setup_spark_jars: removing $name (not in $LIST)"
        rm -f "$f"
    fi
done
if [ "$fetched" -gt 0 ]; then
    echo "setup_spark_jars: $fetched jar(s) fetched; ${#wanted[@]} in $DEST"
fi
