"""Rule loading, the intermediate form, evaluators (durable_rules and reference), conflicts, advice."""
