"""The ``gregor`` Python data source: Spark's Kafka source and sink for any
Kafka-compatible broker, without Spark's Kafka jar: executors fetch record batches from
partition leaders themselves (:mod:`gregor.spark.partition_reader`), while offsets are
looked up and the sink produces with confluent-kafka."""

from __future__ import annotations

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
)
from pyspark.sql.types import StructType

from gregor.spark.batch_reader import GregorBatchReader
from gregor.spark.options import parse_sink_options, parse_source_options
from gregor.spark.schema import source_schema
from gregor.spark.stream_reader import GregorStreamReader
from gregor.spark.writer import GregorArrowWriter, GregorStreamArrowWriter, sink_columns


class GregorDataSource(DataSource):
    """Options are parsed when Spark asks for a reader or writer, on the driver, so that
    a mistake fails the query at planning time with a message that names the option."""

    @classmethod
    def name(cls) -> str:
        return "gregor"

    def schema(self) -> StructType:
        include_headers = str(self.options.get("includeHeaders", "false")).lower() == "true"
        return source_schema(include_headers)

    def reader(self, schema: StructType) -> DataSourceReader:
        return GregorBatchReader(parse_source_options(self.options, streaming=False))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return GregorStreamReader(parse_source_options(self.options, streaming=True))

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        if overwrite:
            raise ValueError("a topic is append-only: use mode 'append', not 'overwrite'")
        options = parse_sink_options(self.options)
        return GregorArrowWriter(options, sink_columns(schema, options))

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        # overwrite is True in Complete mode; a topic is append-only, so each micro-batch's
        # whole result is appended, as Spark's Kafka sink does. Update mode comes here as
        # appends through the JVM source's table only (see the writer module).
        options = parse_sink_options(self.options)
        return GregorStreamArrowWriter(options, sink_columns(schema, options))
