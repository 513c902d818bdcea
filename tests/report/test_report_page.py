"""lab.report's page: its layout (axis ranges, label positions, chart columns) read from the plotly figures'
data, the runs table's filter/sort/group data and per-run drill-down, and --serve over http."""
from __future__ import annotations

import json
import math
import os
import re
import select
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from conftest import ROOT
from test_report import (
    _ablation,
    _chromium,
    _cost_runs,
    _curve_run,
    _diverging_sweep,
    _probed,
    write_run,
)

from lab.report import collect

# ---------------------------------------------------------------------------------------------- layout (item 8)


def _xs(fig) -> list[float]:
    return [x for t in fig.data for x in t.x]


def _marker_runs(root):
    """learned x 2 seeds to step 400, rotary running at step 300; every run logs train/aux up to step 100 only."""
    for job, seed in enumerate((1, 2)):
        _curve_run(root / str(job), "learned", seed, 400, 0.003)
    _curve_run(root / "2", "rotary_with_a_long_name", 1, 300, 0.003, status={"state": "running"})
    for job in range(3):
        metrics = root / str(job) / "csv" / "metrics.csv"
        lines = metrics.read_text().splitlines()
        metrics.write_text("\n".join([lines[0] + ",train/aux", *(line + (",1.0" if int(line.split(",")[0]) <= 100 else ",")
                                                                 for line in lines[1:])]) + "\n")
    return root


def test_the_compared_step_marker_stays_inside_the_data(tmp_path):
    """A metric logged up to step 100 of runs compared at step 300 got the "compared at step 300" line, which
    stretched its x-axis to three times its data (the test was each run's last step of any column). Now the
    line is drawn only inside a curve's own steps, carrying its own label (no annotation beside it)."""
    report = collect([_marker_runs(tmp_path)])
    charts = dict(dict(report.sections)["Curves"])
    assert report.budget.step == 300 and max(_xs(charts["train/aux"])) == 100
    assert charts["train/aux"].layout.shapes == ()
    (line,) = charts["val/loss"].layout.shapes
    assert line.label.text == "compared at step 300" and line.x0 == line.x1 == 300 and charts["val/loss"].layout.annotations == ()
    for fig in charts.values():  # whatever is placed on an x-axis lies within that chart's data
        assert all(min(_xs(fig)) <= s.x0 <= max(_xs(fig)) for s in fig.layout.shapes)


def test_cost_chart_labels_run_toward_the_middle_so_none_is_cut_at_the_edge(tmp_path):
    """Labels centred on the outermost points ran past the plot's edge ("positions=lear")."""
    from lab.report.charts import label_sides

    assert label_sides([1.0, 2.0, 3.0]) == ["top right", "top center", "top left"]
    assert label_sides([5.0, 5.0]) == ["top center", "top center"]  # one x: nothing to lean toward
    report = collect([_cost_runs(tmp_path, flops=True, overlap=False)])
    for _, fig in dict(report.sections)["Quality vs cost"]:
        points = fig.data[0]
        left, right = min(points.x), max(points.x)
        sides = dict(zip(points.x, points.textposition))
        assert sides[left] == "top right" and sides[right] == "top left", sides


def test_charts_fill_a_wide_page_in_as_many_columns_as_fit():
    """Charts were 560 px wide each: two columns and an empty half on a wide page."""
    from lab.report.html import CSS

    charts = re.search(r"\.charts\{([^}]*)\}", CSS).group(1)
    assert "display:grid" in charts and "repeat(auto-fill,minmax(" in charts
    assert not re.search(r"\.chart\{[^}]*(?<![-\w])width:\d", CSS)  # no fixed width per chart


def test_huge_values_before_a_nan_do_not_flatten_the_healthy_curves(tmp_path):
    """A run whose loss climbs to 1e6 before its NaN set the linear y-axis to 0-1e6: every other curve was a
    flat line at the bottom. Now the y-range is the healthy runs' and the title says what is clipped."""
    root = _diverging_sweep(tmp_path)
    rows = [{"step": s, "train/loss": 1e6 * s if s < 40 else math.nan} for s in range(10, 51, 10)]
    write_run(root / "5", {"name": "lr", "seed": 3, "task": {"lr": 1e-2}, "optimized_metric": "val/loss"}, rows,
              finished=False, status={"state": "failed", "error": "error: loss is NaN"})
    report = collect([root])
    (fig,) = [f for t, f in dict(report.sections)["Curves"] if t == "train/loss"]
    healthy = [4.0 - s / 100 - lr * 10 + seed / 100 for lr in (1e-3, 1e-2) for seed in (1, 2, 3)
               for s in range(10, 201, 10) if not (lr == 1e-2 and seed == 3)]
    span = max(healthy) - min(healthy)
    assert list(fig.layout.yaxis.range) == pytest.approx([min(healthy) - 0.05 * span, max(healthy) + 0.05 * span])
    assert fig.layout.title.text == "train/loss<br><sup>y-axis clipped to the runs that did not diverge: 1 diverged run(s) reach 3e+07</sup>"
    # a diverged run that stays within the healthy range leaves the axis to plotly
    (fig,) = [f for t, f in dict(collect([_diverging_sweep(tmp_path / "mild")]).sections)["Curves"] if t == "train/loss"]
    assert fig.layout.yaxis.range is None and fig.layout.title.text == "train/loss"


@pytest.mark.skipif(_chromium() is None, reason="headless Chromium is not installed (apt-get install -y chromium)")
def test_browser_no_axis_stretched_past_the_data_and_no_point_label_cut(tmp_path):
    """As drawn: each curve chart's x-axis ends within plotly's padding of its last step (train/aux's ran to the
    compared step, 3x its data), and every cost-chart label lies inside its chart."""
    _marker_runs(tmp_path)
    probe = ("<script>setTimeout(()=>{const cut=[],ranges={};document.querySelectorAll('.chart').forEach(d=>{"
             "const svg=d.querySelector('.main-svg').getBoundingClientRect();d.querySelectorAll('.textpoint text').forEach(t=>{"
             "const r=t.getBoundingClientRect();if(r.left<svg.left-1||r.right>svg.right+1)cut.push(t.textContent)});"
             "const xs=d.data.flatMap(t=>Array.from(t.x||[]));"
             "if(d.classList.contains('curve'))ranges[d.title]=[d.layout.xaxis.range[1],Math.min(...xs),Math.max(...xs)]});"
             "document.body.dataset.cut=JSON.stringify(cut);document.body.dataset.ranges=JSON.stringify(ranges)},3000)</script>")
    _, attr = _probed(tmp_path, probe, tmp_path / "p")
    assert json.loads(attr("cut")) == []
    ranges = json.loads(attr("ranges"))
    assert set(ranges) >= {"val/loss", "train/loss", "train/aux"}
    assert all(end <= last + 0.1 * (last - first) for end, first, last in ranges.values()), ranges


@pytest.mark.skipif(_chromium() is None, reason="headless Chromium is not installed (apt-get install -y chromium)")
def test_browser_legends_leave_the_plot_its_height_and_its_axis_title(tmp_path):
    """The README's example shape, 3 variants x 2 seeds, as drawn: each curve chart's legend lists the 3 variants
    (a legend entry per seed took most of the chart and scrolled), does not cover the x-axis title (placed 0.18 of
    the plot's height under the plot, it sat on "step"), and the plot area keeps at least 45% of the chart's height
    and 75% of its width (beside the plot, the legend of long labels takes a third)."""
    for job, (variant, seed) in enumerate((v, s) for v in ("learned", "rotary", "sinusoidal_with_a_long_name") for s in (1, 2)):
        _curve_run(tmp_path / str(job), variant, seed, 400, 0.003)
    probe = ("<script>setTimeout(()=>{const out={};document.querySelectorAll('.chart.curve').forEach(d=>{"
             "const c=d.getBoundingClientRect(),area=d.querySelector('.nsewdrag').getBoundingClientRect(),"
             "title=d.querySelector('.xtitle').getBoundingClientRect(),legend=d.querySelector('.legend').getBoundingClientRect();"
             "out[d.title]={entries:d.querySelectorAll('.legend .traces').length,height:area.height/c.height,width:area.width/c.width,"
             "covers:title.bottom>legend.top&&legend.bottom>title.top&&title.right>legend.left&&legend.right>title.left}});"
             "document.body.dataset.legends=JSON.stringify(out)},3000)</script>")
    _, attr = _probed(tmp_path, probe, tmp_path / "p")
    legends = json.loads(attr("legends"))
    assert set(legends) >= {"val/loss", "train/loss"}
    for chart, seen in legends.items():
        assert seen["entries"] == 3 and not seen["covers"] and seen["height"] >= 0.45 and seen["width"] >= 0.75, (chart, seen)


# ---------------------------------------------------------------------------------------------- runs table (item 6)


def _page_data(page: str) -> dict:
    """The runs' records as the page's script reads them."""
    return json.loads(re.search(r"const D=(\{.*?\}),table=document", page, re.S).group(1).replace("<\\/", "</"))


def test_the_runs_table_data_is_every_run_in_the_tables_order_with_its_whole_config_and_curves(tmp_path):
    """The runs table could not be filtered, sorted or grouped by a config key, and a run had no record of its
    own: the page now carries each run's config, curves and status, row for row with the table it drives."""
    from lab.report import html, runs_view

    report = collect([_ablation(tmp_path / "runs")])
    data = runs_view.records(report)
    table = next(t for t in report.tables if t.name == "runs")
    assert [r["name"] for r in data["runs"]] == [row[0].text for row in table.rows]
    assert [r["variant"] for r in data["runs"]] == [row[1].text for row in table.rows]
    assert set(data["differing"]) == {"task.optimizer.lr", "seed", "data.seed", "data.cache_dir", "logger.wandb.id",
                                      "name", "paths.output_dir"}
    assert data["keys"][: len(data["differing"])] == data["differing"] and "optimized_metric" in data["keys"]
    by_name = {r.name: r for r in report.runs}
    for rec in data["runs"]:
        run = by_name[rec["name"]]
        assert rec["config"] == run.config and rec["state"] == "finished" and rec["attempts"] == 1
        assert rec["curves"]["val/loss"] == [list(s) for s in run.series("val/loss")]
        assert rec["curves"]["train/loss"][1] == [5.0, 4.0, 3.5]  # the CSV's rows, by hand
    assert _page_data(html.render(report)) == data  # what the page's script gets


def test_a_diverged_runs_record_has_null_where_its_loss_was_nan(tmp_path):
    from lab.report import runs_view

    rec = next(r for r in runs_view.records(collect([_diverging_sweep(tmp_path)]))["runs"] if r["name"] == "5")
    assert rec["curves"]["train/loss"][1][3:] == [None, None] and rec["state"].startswith("diverged at step 40")
    json.dumps(rec, allow_nan=False)  # valid JSON: no NaN literal


def _killed_and_resumed(run):
    """Run `run`'s status.json as lab.runtime.sweeps.jobs writes it (RunDir.write_status): attempt 1 started and
    was SIGKILLed after logging step 19 (no end written), attempt 2 resumed from its step-10 checkpoint and completed."""
    from lab.runtime.rundir.run_dir import RunDir

    rows = (run / "csv" / "metrics.csv").read_text()
    (run / "csv" / "metrics.csv").write_text(rows.split("\n", 1)[0] + "\n")  # attempt 1 starts with no rows yet
    status = RunDir(run)
    status.write_status(state="running", attempts=1, pid=101, host="hostA", started="2026-01-01T00:00:00+00:00")
    (run / "csv" / "metrics.csv").write_text(rows)
    status.write_status(state="running", attempts=2, pid=202, host="hostA", resumed_from=10)
    status.write_status(state="completed")


def test_a_runs_record_has_its_state_history_with_a_killed_attempt_named(tmp_path):
    """The drill-down showed only the last state and "attempts: 2": when each attempt ran, in which process, from
    which step, and that attempt 1 was killed (it wrote no end) were not in the page."""
    from lab.report import runs_view

    root = _ablation(tmp_path / "runs", lrs=(1e-3,), seeds=(1, 2))
    _killed_and_resumed(root / "1")
    (root / "0" / "status.json").write_text(json.dumps({"state": "completed", "attempts": 1}))  # before history existed
    recs = {r["name"]: r for r in runs_view.records(collect([root]))["runs"]}
    history = json.loads((root / "1" / "status.json").read_text())["history"]
    at = [e["at"].replace("T", " ").replace("+00:00", " UTC") for e in history]
    assert recs["1"]["timeline"] == [
        [at[0], "attempt 1 started (pid 101 on hostA)"],
        ["", "attempt 1: no end recorded (killed or crashed), metrics logged to step 19"],
        [at[1], "attempt 2 resumed from step 10 (pid 202 on hostA)"],
        [at[2], "attempt 2 completed at step 19"]]
    assert recs["1"]["resumes"] == [[10, 2]]
    assert recs["0"]["timeline"] == [["", "no state history recorded (a status.json from before lab kept one): "
                                          "finished, 1 attempt"]] and recs["0"]["resumes"] == []


# What a person sees of the runs table: its rows top to bottom (a group's header row as [its text]), driven through
# the controls above it as a person changes them (input and change events), and its column headers clicked.
RUNS_SEEN = ("const b=document.body,e=id=>document.getElementById(id),t=document.querySelector('table.runs'),"
             "seen=()=>[...t.tBodies[0].rows].map(r=>r.classList.contains('dtrg-group')?'['+r.textContent+']':r.cells[0].textContent).join(' '),"
             "put=(id,v,ev)=>{e(id).value=v;e(id).dispatchEvent(new Event(ev))},"
             "head=h=>[...t.tHead.rows[0].cells].find(c=>c.textContent===h).click();")


@pytest.mark.skipif(_chromium() is None, reason="headless Chromium is not installed (apt-get install -y chromium)")
def test_browser_filters_sorts_groups_the_runs_by_config_keys_and_opens_a_runs_record(tmp_path):
    """In the page (DataTables): the filter shows exactly the runs it names, sorting by a config key or by a
    clicked header orders the rows by its values, grouping shows one header per value with its count, and clicking
    run 4 shows its config, state, history and a curve per attempt. The expected rows come from the configs."""
    from collections import Counter

    from lab.report import runs_view

    root = _ablation(tmp_path / "runs", values={(lr, s): 3.0 + s / 10 - lr * 37 for lr in (1e-3, 3e-3) for s in (1, 2, 3)})
    _killed_and_resumed(root / "4")
    probe = ("<script>setTimeout(()=>{" + RUNS_SEEN + "b.dataset.ready=t.dataset.ready;"
             "put('runs-filter','seed!=1','input');b.dataset.notseed1=seen();put('runs-filter','lr=0.003 seed!=1','input');"
             "b.dataset.filtered=seen();put('runs-filter','abl/lr0.003','input');b.dataset.text=seen();put('runs-filter','','input');"
             "put('runs-sort','seed','change');b.dataset.byseed=seen();"
             "e('runs-group').value='task.optimizer.lr';put('runs-order','-1','change');b.dataset.grouped=seen();"
             "b.dataset.heads=[...t.tHead.rows[0].cells].map(c=>c.textContent).join('|');"
             "put('runs-group','','change');put('runs-sort','','change');head('val/loss (compared)');"
             "setTimeout(()=>{head('val/loss (compared)');setTimeout(()=>{"  # DataTables orders a click after a timeout
             "b.dataset.clicked=seen()+'|'+e('runs-sort').value+'|'+e('runs-order').value+'|'+location.hash;"
             "[...t.tBodies[0].rows].find(r=>r.cells[0].textContent==='4').click()},100)},100);"
             "setTimeout(()=>{const p=document.getElementById('run-curve-plot');b.dataset.drawn=p.querySelectorAll('.main-svg').length;"
             "b.dataset.attempts=p.data.map(t=>t.name+':'+t.x.join(',')).join(' ');"
             "b.dataset.marks=p.layout.shapes.map(s=>s.x0).join(',')+' '+p.layout.annotations.map(a=>a.text).join(',');"
             "b.dataset.history=[...document.querySelectorAll('#run-detail ol.run-history li')].map(l=>l.textContent).join('|')},800)},3000)</script>")
    dom, attr = _probed(root, probe, tmp_path / "p")
    report = collect([root])
    runs = {r.name: r for r in report.runs}
    names = [row[0].text for row in next(t for t in report.tables if t.name == "runs").rows]  # as written, unsorted
    config = lambda name, key: runs[name].config[key]  # noqa: E731
    assert attr("ready") == "1"
    assert attr("notseed1") == " ".join(n for n in names if config(n, "seed") != 1)
    assert attr("filtered") == " ".join(n for n in names if config(n, "seed") != 1 and config(n, "task.optimizer.lr") == 0.003)
    assert attr("text") == " ".join(n for n in names if "abl/lr0.003" in config(n, "name"))
    assert attr("byseed") == " ".join(sorted(names, key=lambda n: config(n, "seed")))  # stable: table order within a seed
    counts = Counter(config(n, "task.optimizer.lr") for n in names)
    assert attr("grouped") == " ".join(
        f"[task.optimizer.lr = {lr} ({counts[lr]} runs)] " + " ".join(sorted((n for n in names if config(n, "task.optimizer.lr") == lr),
                                                                         key=lambda n: -config(n, "seed")))
        for lr in sorted(counts))
    keys = [k for k in runs_view.records(report)["keys"] if k in ("seed", "task.optimizer.lr")]  # in the records' key order
    assert attr("heads").split("|") == next(t for t in report.tables if t.name == "runs").header + keys  # shown while chosen
    by_value = sorted(names, key=lambda n: -runs[n].final("val/loss"))  # the header clicked twice: descending
    assert attr("clicked") == " ".join(by_value) + "|col:5|-1|#sort=col%3A5&order=-1"
    detail = re.search(r'<div id="run-detail" data-run="4">.*?</details>', dom, re.S).group(0)
    assert "<td>task.optimizer.lr</td><td>0.003</td>" in detail and "<td>state</td><td>finished</td>" in detail
    assert int(attr("drawn")) >= 1
    # its state history, and its curve in one part per attempt with a line where attempt 2 resumed (step 10)
    history = attr("history").split("|")
    assert len(history) == 4 and history[0].endswith("attempt 1 started (pid 101 on hostA)")
    assert history[1] == "attempt 1: no end recorded (killed or crashed), metrics logged to step 19"
    assert attr("attempts") == "attempt 1:9 attempt 2:19" and attr("marks") == "10 attempt 2 resumed"


@pytest.mark.skipif(_chromium() is None, reason="headless Chromium is not installed (apt-get install -y chromium)")
def test_browser_the_runs_tables_filter_sort_and_group_survive_a_reload(tmp_path):
    """A reload (--watch, --serve) or a shared link lost the runs table's filter, sort and group: the first load
    sets them and the smoothing, then reloads; the second reads back the controls, the rows shown and the address."""
    root = _ablation(tmp_path / "runs")
    probe = ("<script>setTimeout(()=>{" + RUNS_SEEN +
             "if(!sessionStorage.getItem('reloaded')){sessionStorage.setItem('reloaded','1');put('runs-filter','seed!=1','input');"
             "e('runs-sort').value='seed';e('runs-order').value='-1';put('runs-group','task.optimizer.lr','change');"
             "e('smooth').value='0.5';labControls();location.reload();return}"
             "b.dataset.controls=['runs-filter','runs-sort','runs-order','runs-group','smooth'].map(i=>e(i).value).join('|');"
             "b.dataset.order=seen();b.dataset.hash=location.hash},3000)</script>")
    _, attr = _probed(root, probe, tmp_path / "p")
    assert attr("controls") == "seed!=1|seed|-1|task.optimizer.lr|0.5"
    # lr=0.001's seeds 3 2, then lr=0.003's, seed 1 filtered out
    assert attr("order") == "[task.optimizer.lr = 0.001 (2 runs)] 2 1 [task.optimizer.lr = 0.003 (2 runs)] 5 4"
    from urllib.parse import parse_qs

    assert parse_qs(attr("hash")[1:]) == {"filter": ["seed!=1"], "sort": ["seed"], "order": ["-1"],
                                          "group": ["task.optimizer.lr"], "x": ["step"], "smooth": ["0.5"], "seeds": ["0"]}


@pytest.mark.skipif(_chromium() is None, reason="headless Chromium is not installed (apt-get install -y chromium)")
def test_browser_the_runs_table_library_is_inlined_and_orders_numbers_by_value(tmp_path):
    """The table library (DataTables) is in the page: with every host name unresolvable, the page loads no
    resource but its own blob (a CDN's script would be listed, and the table would stay as written). A loss
    column holding a diverged run's "nan" orders by value (as text, "10.5" came before "9.5"), the nan as empty."""
    nan = float("nan")
    root = _ablation(tmp_path / "runs", lrs=(1e-3, 3e-3), seeds=(1, 2),
                     values={(1e-3, 1): 9.5, (1e-3, 2): 10.5, (3e-3, 1): 9.7, (3e-3, 2): nan})
    probe = ("<script>setTimeout(()=>{" + RUNS_SEEN + "b.dataset.ready=t.dataset.ready;"
             "b.dataset.loaded=performance.getEntriesByType('resource').map(r=>r.name).filter(u=>!u.startsWith('blob:')).join(' ');"
             "head('val/loss (last logged)');setTimeout(()=>{b.dataset.ordered=seen()},100)},3000)</script>")
    _, attr = _probed(root, probe, tmp_path / "p", "--host-resolver-rules=MAP * ~NOTFOUND")
    assert attr("ready") == "1" and attr("loaded") == ""
    final = {r.name: r.final("val/loss") for r in collect([root]).runs}
    assert attr("ordered") == " ".join(sorted(final, key=lambda n: -math.inf if math.isnan(final[n]) else final[n]))


# ---------------------------------------------------------------------------------------------- --serve (item 6)


def test_serve_serves_the_page_on_localhost_and_its_version_changes_when_a_run_writes(tmp_path):
    """There was no way to have the open page follow a sweep but --watch's reload every 5 s of a file; then the
    page asked the server every 2 s. Now the server pushes each new version on an event stream."""
    root = _ablation(tmp_path / "runs", lrs=(1e-3,), seeds=(1, 2))
    proc = subprocess.Popen([sys.executable, "-m", "lab.report", str(root), "--serve", "0", "--wandb", "off"], cwd=ROOT,
                            stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
    killer = threading.Timer(120, proc.kill)
    killer.start()
    try:
        line = ""
        while "serving" not in line:
            line = proc.stderr.readline()
            assert line, "lab.report --serve exited before serving"
        url = re.search(r"serving (http://127\.0\.0\.1:(\d+)/report\.html) \(", line).group(1)
        page = urllib.request.urlopen(url, timeout=30).read().decode()
        assert '<meta name="generator" content="lab.report">' in page and "new EventSource('.lab_report_events')" in page
        assert "fetch('.lab_report_version'" in page  # the fallback
        # the page is revalidated on every load (no stale copy from the browser's cache), and costs a 304 when unchanged
        got = urllib.request.urlopen(url, timeout=30)
        assert got.headers["Cache-Control"] == "no-cache"
        with pytest.raises(urllib.error.HTTPError) as unchanged:
            urllib.request.urlopen(urllib.request.Request(url, headers={"If-None-Match": got.headers["ETag"]}), timeout=30)
        assert unchanged.value.code == 304
        # a render within the second of the copy held is new all the same (Last-Modified alone said 304)
        again = urllib.request.Request(url, headers={"If-None-Match": '"0-0"', "If-Modified-Since": got.headers["Last-Modified"]})
        assert urllib.request.urlopen(again, timeout=30).status == 200
        version = url.replace("report.html", ".lab_report_version")
        first = urllib.request.urlopen(version, timeout=30).read().decode()
        assert first == str((root / "report.html").stat().st_mtime_ns)
        events = urllib.request.urlopen(url.replace("report.html", ".lab_report_events"), timeout=30)
        assert events.headers["Content-Type"] == "text/event-stream"

        def next_event() -> str:  # the next `data:` line of the stream (keep-alive comments skipped)
            while not (line := events.readline().decode()).startswith("data: "):
                assert line, "the event stream ended"
            return line.removeprefix("data: ").strip()

        assert next_event() == first  # the version at once, on connecting
        with open(root / "0" / "csv" / "metrics.csv", "a") as f:  # the run writes a row: re-rendered
            f.write("29,,3.4,\n")
        pushed = next_event()  # pushed by the server when the render is done, nothing asked again
        assert pushed != first and pushed == str((root / "report.html").stat().st_mtime_ns)
        assert urllib.request.urlopen(version, timeout=30).read().decode() == pushed
        events.close()
    finally:
        killer.cancel()
        proc.kill()
        proc.wait()


def test_serve_refuses_a_port_in_use_in_one_line_and_writes_nothing(tmp_path, capsys):
    from lab.report.__main__ import main

    root = _ablation(tmp_path / "runs", lrs=(1e-3,), seeds=(1, 2))
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        with pytest.raises(SystemExit) as exit_:
            main([str(root), "--serve", str(port), "--wandb", "off"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"error: --serve {port}: cannot listen on 127.0.0.1:{port} (Address already in use); pass another "
                   "port, or 0 for any free one"]
    assert not (root / "report.html").exists()


class _Chromium:
    """Headless Chromium driven over --remote-debugging-pipe (fds 3 and 4, NUL-terminated JSON; the standard
    library only): a page that stays open while a server pushes to it, which --dump-dom cannot wait for."""

    def __init__(self, profile: Path):
        child_in, self._out = os.pipe()
        self._in, child_out = os.pipe()

        def fds():  # the child's fds 3 and 4, inheritable (dup2 onto a new number clears close-on-exec)
            a, b = os.dup(child_in), os.dup(child_out)
            os.dup2(a, 3)
            os.dup2(b, 4)

        self.proc = subprocess.Popen([_chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--remote-debugging-pipe",
                                      f"--user-data-dir={profile}", "about:blank"], preexec_fn=fds, close_fds=False,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        os.close(child_in)
        os.close(child_out)
        self._id, self._buf, self._session = 0, b"", None
        page = next(t for t in self.call("Target.getTargets")["targetInfos"] if t["type"] == "page")
        self._session = self.call("Target.attachToTarget", targetId=page["targetId"], flatten=True)["sessionId"]

    def call(self, method: str, **params):
        self._id += 1
        message = {"id": self._id, "method": method, "params": params, **({"sessionId": self._session} if self._session else {})}
        os.write(self._out, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + 60
        while True:
            while b"\0" in self._buf:
                raw, self._buf = self._buf.split(b"\0", 1)
                reply = json.loads(raw)
                if reply.get("id") == self._id:
                    assert "error" not in reply, reply
                    return reply.get("result", {})
            assert select.select([self._in], [], [], max(deadline - time.monotonic(), 0))[0], f"no answer to {method}"
            chunk = os.read(self._in, 1 << 20)
            assert chunk, "chromium exited"
            self._buf += chunk

    def js(self, expression: str):
        return self.call("Runtime.evaluate", expression=expression, returnByValue=True)["result"].get("value")

    def wait(self, expression: str, what: str, timeout: float = 60):
        deadline = time.monotonic() + timeout
        while not self._now(expression):
            assert time.monotonic() < deadline, (what, self.js("[window.labLive,window.labLiveVersion]"))
            time.sleep(0.2)

    def _now(self, expression: str):
        """The expression's value, or None when the page reloaded while it was evaluated (the reload waited for)."""
        try:
            return self.js(expression)
        except AssertionError as e:
            if "Inspected target navigated or closed" in str(e) or "Execution context was destroyed" in str(e):
                return None
            raise

    def close(self):
        self.proc.kill()
        self.proc.wait()


def _rewritten(page: Path) -> None:
    """report.html written anew (a later modification time: a new version)."""
    page.write_text(page.read_text())
    os.utime(page, ns=(time.time_ns(), page.stat().st_mtime_ns + 10**9))


@pytest.mark.skipif(_chromium() is None, reason="headless Chromium is not installed (apt-get install -y chromium)")
def test_browser_a_served_page_reloads_when_pushed_and_falls_back_to_asking(tmp_path, monkeypatch):
    """The served page asked the server every 2 s. Now it hears of a render on the event stream and reloads, and a
    server without the stream (an http error) is asked for the version instead: reloads all the same. Each load
    gets the page written last, not the browser's copy (HTTP/1.0 answers: revalidated by Last-Modified's seconds,
    a 304 for a page written within the second)."""
    from lab.report import html, serve

    root = _ablation(tmp_path / "runs", lrs=(1e-3,), seeds=(1, 2))
    report = collect([root])
    server = serve.bind(root, 0)
    url = serve.start(server)
    browser = _Chromium(tmp_path / "p")
    try:
        browser.call("Page.enable")
        browser.call("Page.addScriptToEvaluateOnNewDocument", source="sessionStorage.setItem('loads',+(sessionStorage.getItem('loads')||0)+1)")
        for live, events in (("events", serve.EVENTS_PATH), ("polling", ".no_such_stream")):
            monkeypatch.setattr(serve, "EVENTS_PATH", events)  # the page's stream; the server keeps its own
            (root / "report.html").write_text(html.render(report, served=True))
            monkeypatch.undo()
            browser.js("sessionStorage.setItem('loads','0')")
            browser.call("Page.navigate", url=url)
            browser.wait(f"window.labLive==='{live}'&&window.labLiveVersion==='{serve.version(root)}'", f"{live}: no version")
            assert browser.js("sessionStorage.getItem('loads')") == "1"
            _rewritten(root / "report.html")
            serve.changed(server)  # what lab.report's render loop does after a render
            browser.wait("sessionStorage.getItem('loads')==='2'", f"{live}: not reloaded after a render")
            browser.wait(f"window.labLiveVersion==='{serve.version(root)}'", f"{live}: not the new version")
    finally:
        browser.close()
        server.shutdown()
        server.server_close()
