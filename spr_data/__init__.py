"""spr-data: raw corpora → clean, sharded, memory-mapped Arrow datasets for safe training."""

from spr_data._version import __version__
from spr_data.dataset import Dataset, open_dataset
from spr_data.errors import DatasetError, InputError, OutputError, ReadError, SprDataError
from spr_data.pipeline.audit import IdsRecorder, audit_dataset
from spr_data.pipeline.ingest import IngestSummary, ingest
from spr_data.reader import ReaderOptions, RetryPolicy
from spr_data.verify import VerifyReport, verify_dataset

__all__ = [
    "Dataset",
    "DatasetError",
    "IdsRecorder",
    "IngestSummary",
    "InputError",
    "OutputError",
    "ReadError",
    "ReaderOptions",
    "RetryPolicy",
    "SprDataError",
    "VerifyReport",
    "__version__",
    "audit_dataset",
    "ingest",
    "open_dataset",
    "verify_dataset",
]
