package ui

import (
	"fmt"
	"time"
)

// barChart is a bar chart drawn as SVG by the "bars" template: failures
// per time bucket.
type barChart struct {
	W, H   float64
	Bars   []bar
	Max    int64
	Labels []axisLabel // under the bars; none for a sparkline
}

type bar struct {
	X, Y, W, H float64
	Title      string
}

type axisLabel struct {
	X      float64
	Text   string
	Anchor string
}

func bars(counts []int64, from time.Time, width time.Duration, w, h float64) barChart {
	c := barChart{W: w, H: h}
	for _, n := range counts {
		c.Max = max(c.Max, n)
	}
	if len(counts) == 0 {
		return c
	}
	bw := w / float64(len(counts))
	for i, n := range counts {
		bh := 0.0
		if c.Max > 0 {
			bh = h * float64(n) / float64(c.Max)
		}
		if n > 0 {
			bh = max(bh, 1)
		}
		start := from.Add(time.Duration(i) * width)
		c.Bars = append(c.Bars, bar{X: float64(i) * bw, Y: h - bh, W: max(bw-1, 1), H: bh,
			Title: fmt.Sprintf("%d failures from %s to %s", n, ts(start), ts(start.Add(width)))})
	}
	return c
}

// sparkline is a group's small chart.
func sparkline(counts []int64, from time.Time, width time.Duration) barChart {
	return bars(counts, from, width, 120, 22)
}

// overview is the failures page's chart, with its time axis.
func overview(counts []int64, from time.Time, width time.Duration) barChart {
	c := bars(counts, from, width, 720, 80)
	end := from.Add(time.Duration(len(counts)) * width)
	c.Labels = []axisLabel{{X: 0, Text: ts(from), Anchor: "start"}, {X: c.W, Text: ts(end), Anchor: "end"}}
	return c
}
