"""Built-in rule pack: one YAML file per rule under <layer>/."""
