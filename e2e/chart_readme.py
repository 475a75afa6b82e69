"""Write charts/specpilot/README.md from values.yaml's comments: `make chart-readme`."""

from __future__ import annotations

from specpilot.testing.helm import VALUES_README, chart_readme

if __name__ == "__main__":
    VALUES_README.write_text(chart_readme())
    print(f"wrote {VALUES_README.relative_to(VALUES_README.parents[2])}")
