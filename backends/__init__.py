"""Built-in backends: cpu (reference), nvidia, moore, metax."""
