"""Contract suites: every registered mutator, evaluator and search space, and every store,
checked by the same tests.

The suites are fed by the plugin registry (`evokernel.core.plugins`, the entry points
`evokernel plugins` lists): a third-party package that registers a component in its own
pyproject.toml is checked by these tests as soon as it is installed. How the suites build a
component is in `_components.py`: a zero-argument call of what the entry point names, or its
`example()` where it needs arguments (`evokernel.core.plugins.HasExample`), or, for the
shipped components that need test data (a landscape, a problem file, recorded HTTP
responses), a recipe there.
"""
