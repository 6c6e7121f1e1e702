"""The search engine.

`search` is the loop; beside it `options` (Budget, SearchOptions), `seeding` (the first
generation, seeds, transfer, learned failures of earlier runs), `propose` (the next genome),
`remeasure` (the final re-measurement of the elites), `report` (what a run tells its
observers), `strategies` and `bandit`; `assemble` builds a search as the command line does.
`transfer`, `learned`, `sweep` and `landscape` are the pieces those use.
"""
