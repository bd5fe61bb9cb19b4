package main

import (
	"math"
	"slices"
	"time"
)

// Every latency is kept as a full sample (per goroutine, merged after the
// cell) rather than in a histogram: cells are short and bounded by
// -max-ops, so the samples fit easily, and exact percentiles avoid bucket
// error at the small (tens of µs) values that matter here.

// durations is a sample of latencies.
type durations []time.Duration

// percentile returns the nearest-rank p-th percentile (0 < p ≤ 100); it
// sorts the sample in place. An empty sample gives -1, shown as "–".
func (d durations) percentile(p float64) time.Duration {
	if len(d) == 0 {
		return -1
	}
	if !slices.IsSorted(d) {
		slices.Sort(d)
	}
	rank := int(math.Ceil(p/100*float64(len(d)))) - 1
	return d[max(0, min(rank, len(d)-1))]
}

func (d durations) mean() time.Duration {
	if len(d) == 0 {
		return -1
	}
	var sum time.Duration
	for _, v := range d {
		sum += v
	}
	return sum / time.Duration(len(d))
}

func (d durations) max() time.Duration {
	if len(d) == 0 {
		return -1
	}
	return slices.Max(d)
}

// median of the repetitions' values of one metric. Values < 0 mean "not
// measured" and are skipped; if none is left the result is -1. With an
// even count it is the mean of the middle two.
func median(vals []float64) float64 {
	var v []float64
	for _, x := range vals {
		if x >= 0 && !math.IsNaN(x) {
			v = append(v, x)
		}
	}
	if len(v) == 0 {
		return -1
	}
	slices.Sort(v)
	n := len(v)
	if n%2 == 1 {
		return v[n/2]
	}
	return (v[n/2-1] + v[n/2]) / 2
}

// ratio returns a/b, or -1 when either is not measured.
func ratio(a, b float64) float64 {
	if a < 0 || b <= 0 {
		return -1
	}
	return a / b
}
