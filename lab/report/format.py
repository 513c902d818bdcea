"""Numbers formatted for people: thousands separators, 3-4 significant digits, no 1.888e+04."""
from __future__ import annotations

import math


def fmt(v, digits: int = 4) -> str:
    """18880.3 -> '18,880'; 3.14159 -> '3.142'; 0.0003 -> '0.0003'; 1.2e-7 -> '1.2e-07'; None -> ''."""
    if v is None:
        return ""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return str(v)
    if isinstance(v, int) or (math.isfinite(v) and abs(v) >= 10 ** (digits - 1)):
        return f"{v:,.0f}"  # integers carry all the digits that matter
    if not math.isfinite(v):
        return str(v)
    return f"{v:.{digits}g}"


def fmt_pm(mean: float, std: float | None) -> str:
    """'3.460 ± 0.026': the std to 2 significant digits and the mean to the same decimals (at least as many as
    fmt gives it); the mean alone for a single run or when every run has the same value."""
    if std is None or std == 0:  # a value every seed shares (a schedule's lr) has no spread to show
        return fmt(mean)
    if not math.isfinite(std):
        return f"{fmt(mean)} ± {fmt(std)}"
    shown = fmt(mean)
    mean_decimals = len(shown.split(".")[1]) if "." in shown and "e" not in shown else 0
    decimals = min(8, max(mean_decimals, 1 - math.floor(math.log10(std))))
    return f"{mean:,.{decimals}f} ± {std:,.{decimals}f}"


def fmt_p(p: float | None) -> str:
    if p is None:
        return ""
    return "p<0.001" if p < 0.001 else f"p={p:.3f}"


def fmt_diff(d: float) -> str:
    return ("+" if d > 0 else "") + fmt(d, 3)


def fmt_duration(seconds: float | None) -> str:
    """95.3 -> '1m35s'; 4000 -> '1h06m'; None -> ''."""
    if seconds is None:
        return ""
    if seconds >= 3600:
        hours, m = divmod(round(seconds / 60), 60)
        return f"{hours}h{m:02d}m"
    m, s = divmod(round(seconds), 60)
    return f"{m}m{s:02d}s" if m else f"{s}s"
