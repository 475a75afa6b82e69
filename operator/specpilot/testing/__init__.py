"""What the tests, the benchmarks and the e2e scripts share, run from a checkout of the repository: fakes
of the controller's ports and a harness that drives a pilot through the real shell (`fakes`, `harness`),
the mock profile the decision tests run (`decision_profile`), the chart as helm renders it (`helm`) and
waiting on a condition (`waiting`). No product package imports it (.importlinter)."""
