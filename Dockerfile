# One image for every service of docker-compose.yaml: Airflow 3.3.2 with airflow-iqp,
# and Java 17 so that the same image runs the Spark standalone master and worker
# (pyspark ships the Spark distribution), so Spark is one version everywhere.
FROM apache/airflow:3.3.2-python3.11

USER root
RUN apt-get update \
 && apt-get install -y --no-install-recommends openjdk-17-jre-headless procps \
 && rm -rf /var/lib/apt/lists/*
ENV JAVA_HOME=/usr/lib/jvm/java-17-openjdk-amd64

USER airflow
COPY --chown=airflow:root pyproject.toml README.md /opt/airflow-iqp/
COPY --chown=airflow:root airflow_iqp /opt/airflow-iqp/airflow_iqp
RUN pip install --no-cache-dir "/opt/airflow-iqp"
