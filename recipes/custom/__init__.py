"""One's own in-process recipe, named by import path (``recipe: my_pkg.module:build``)."""
