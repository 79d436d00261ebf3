"""`kbopt schema`: the JSON Schema of facts documents or of rule files."""
from __future__ import annotations

import json
import sys
from typing import Any

from kbopt.errors import EXIT_OK
from kbopt.kb.schema import RULE_SCHEMA, facts_schema


def run(args: Any) -> int:
    schema = facts_schema() if args.which == "facts" else RULE_SCHEMA
    sys.stdout.write(json.dumps(schema, indent=2) + "\n")
    return EXIT_OK
