package main

import (
	"slices"
	"time"
)

// percentile is the nearest-rank p-th percentile (0 < p <= 100) of sorted
// durations: the smallest value with at least p% of the values at or below
// it. Zero for no values.
func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	rank := int(float64(len(sorted))*p/100 + 0.999999999) // ceil without float noise
	rank = min(max(rank, 1), len(sorted))
	return sorted[rank-1]
}

// median of values (the mean of the middle two for an even count); the
// benchmark repeats every point and quotes this.
func median(values []float64) float64 {
	if len(values) == 0 {
		return 0
	}
	s := slices.Clone(values)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// ms converts a duration to float milliseconds for tables.
func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// us converts a duration to float microseconds for tables.
func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }
