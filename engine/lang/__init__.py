"""The rule expression language, one module per job.

Conditions (`when`) are boolean: comparisons of a fact with a literal, a named parameter or
another fact; `and`, `or`, `not`; `x in [..]` and `"v" in list_fact`; `known(f)`, `missing(f)`;
a bool fact on its own; `quality(f) == "measured"` (where the fact came from). Values (`derive`,
recommended `params`, written `= expr`) add arithmetic and a few pure functions.

- nodes: the engine-neutral form (frozen dataclasses; the `Node`, `Condition`, `Value` and
  `Leaf` unions), and `facts_of`
- operators: the one table of comparisons, arithmetic, boolean operators and functions
- parse: rule text -> nodes, checked against the fact vocabulary
- logic: three-valued evaluation (`evaluate`, `undecided_by`, `witnesses`, `value_of`)
- normal_form: `to_nnf`, `to_dnf`, for backends without negation
- text: `render`, `describe`, `fmt`
- template: the `{fact}` / `{parameter:spec}` placeholders of `because` texts
- errors: `ExprError`
"""
