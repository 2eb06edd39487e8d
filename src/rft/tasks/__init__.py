"""Task data in verl's row format: the synthetic arithmetic and calculator tasks, GSM8K conversion, parquet/jsonl
io."""

from rft.data.io import read_rows, write_parquet
from rft.tasks.arithmetic import arithmetic_rows, preference_rows, write_arithmetic
from rft.tasks.calculator import write_calculator
from rft.tasks.gsm8k import convert_gsm8k, gsm8k_ground_truth, gsm8k_rows

__all__ = [
    "arithmetic_rows",
    "convert_gsm8k",
    "gsm8k_ground_truth",
    "gsm8k_rows",
    "preference_rows",
    "read_rows",
    "write_arithmetic",
    "write_calculator",
    "write_parquet",
]
