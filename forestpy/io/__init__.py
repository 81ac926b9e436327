"""forestpy input/output: run summaries (JSON)."""

from forestpy.io.summary import read_json, to_jsonable, write_json_atomic, write_text_atomic

__all__ = ["to_jsonable", "write_json_atomic", "read_json", "write_text_atomic"]
