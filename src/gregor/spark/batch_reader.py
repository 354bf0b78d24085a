"""``spark.read.format("gregor")``: one bounded DataFrame of a range of a topic."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, InputPartition

from gregor.spark.offset_lookup import OffsetLookup
from gregor.spark.options import SourceOptions
from gregor.spark.partition_range import plan_ranges, read_settings
from gregor.spark.partition_reader import read_range


class GregorBatchReader(DataSourceReader):
    """Plans one task per partition range on the driver, reads ranges on executors.

    The offsets are resolved once, in :meth:`partitions`, so every task of the query sees
    the same end offsets even while producers keep appending.
    """

    def __init__(self, options: SourceOptions) -> None:
        self._options = options

    def partitions(self) -> Sequence[InputPartition]:
        options = self._options
        lookup = OffsetLookup(options.client_config)
        tps = lookup.partitions(options.subscription)
        start = lookup.resolve(
            options.starting,
            tps,
            starting=True,
            fail_if_no_timestamp_match=options.fail_if_no_timestamp_match,
        )
        end = lookup.resolve(options.ending, tps, starting=False, fail_if_no_timestamp_match=False)
        return plan_ranges(
            start, end, lookup.earliest(tps), read_settings(options), options.min_partitions,
            options.max_records_per_partition
        )

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return read_range(partition)
