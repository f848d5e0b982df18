"""The base layer: helpers every other layer may use, importing no other layer of the package.

The shared exceptions (``errors``), progress lines, the machine's and memory's facts, the
gates' rules, the flags' parsing, the statistical verdict, the images' names, the cost model
of a mode's exchanges and the other packages' entry points (``plugins``).
"""
