"""Option types shared by several commands."""

from enum import Enum


class OutputFormat(str, Enum):
    table = "table"
    json = "json"
