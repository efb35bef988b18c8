"""Building blocks of the models, each choosing its implementation once, at load."""
