"""The pipeline, one folder a stage: lang (conditions and values) -> pack (rules loaded into the
intermediate form) -> evaluators (chaining) -> conflicts (the strategy graph) -> advice
(explanations and the Advice value). authoring/ holds the tools for rule writers."""
