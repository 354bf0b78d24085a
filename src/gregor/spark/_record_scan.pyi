from typing import Any

from gregor.protocol.record_batch import BatchHeader

def scan_records(
    records: Any, header: BatchHeader, first: int, last: int, columns: tuple[Any, ...],
    cursor: tuple[int, ...],
) -> tuple[int, ...]: ...
