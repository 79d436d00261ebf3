"""`kbopt collect`: a facts document from NVML, engine metrics and request traces."""
from __future__ import annotations

import json
from typing import Any

from kbopt.commands.collecting import collected_document
from kbopt.errors import EXIT_OK
from kbopt.kb.facts import facts_from_document
from kbopt.output import write_output


def run(args: Any) -> int:
    document = collected_document(args)
    facts_from_document(document, "collected facts")      # what we write must read back
    write_output(json.dumps(document, indent=2, ensure_ascii=False) + "\n", args.output)
    return EXIT_OK
