"""The scaling view's loss-vs-FLOPs chart of lab.report, alone, as a standalone HTML page for a screenshot
(scaling.png; the full report.html inlines plotly.js, 5 MB, and is not committed).
Usage: python experiments/scaling_ladder/figure.py <runs dir> <out.html>"""
import sys
from pathlib import Path

from lab.report import collect

report = collect([Path(sys.argv[1])], budget="finished")
figure = dict(dict(report.sections)["Scaling"])[f"{report.metric} vs training FLOPs"]
figure.update_layout(width=1000, height=560)
figure.write_html(sys.argv[2], include_plotlyjs=True)
