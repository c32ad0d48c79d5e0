"""Small summaries of latency samples: median and p90, and the ratios the report prints."""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from datetime import datetime


@dataclass(frozen=True)
class Summary:
    """Median and p90 of a list of samples, in the samples' own unit."""

    n: int
    median: float
    p90: float

    @classmethod
    def of(cls, samples: list[float]) -> Summary:
        if not samples:
            raise ValueError("no samples to summarise")
        return cls(len(samples), statistics.median(samples), percentile(samples, 0.9))

    def fmt(self, scale: float = 1.0, unit: str = "ms", digits: int = 1) -> str:
        p50, p90 = self.median * scale, self.p90 * scale
        return f"p50 {p50:.{digits}f} {unit}  p90 {p90:.{digits}f} {unit}  (n={self.n})"


def percentile(samples: list[float], q: float) -> float:
    """Linear interpolation between closest ranks (numpy's default); fine for a few samples."""
    ordered = sorted(samples)
    pos = (len(ordered) - 1) * q
    lo = int(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def seconds_between(start: datetime, end: datetime) -> float:
    return (end - start).total_seconds()


def ratio(numerator: float, denominator: float) -> str:
    return f"{numerator / denominator:.2f}" if denominator else "n/a"
