"""Key/value tables stored in segments (table segments), used for the controller's metadata."""

from millrace.store.tables.table_store import (
    NOT_EXISTS,
    ExpectedVersion,
    IteratorPage,
    NotATableError,
    TableChanges,
    TableConfig,
    TableEntry,
    TableInfo,
    TableKey,
    TableNotEmptyError,
    TableStore,
    continuation_after,
    is_conditional_failure,
)

__all__ = [
    "NOT_EXISTS",
    "ExpectedVersion",
    "IteratorPage",
    "NotATableError",
    "TableChanges",
    "TableConfig",
    "TableEntry",
    "TableInfo",
    "TableKey",
    "TableNotEmptyError",
    "TableStore",
    "continuation_after",
    "is_conditional_failure",
]
