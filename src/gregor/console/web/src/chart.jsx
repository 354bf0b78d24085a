import { useEffect, useRef } from 'preact/hooks';
import uPlot from 'uplot';
import 'uplot/dist/uPlot.min.css';
import { formatClock } from './format.js';

// The time axis writes each tick on one line, far enough apart for a phone: uPlot's own
// labels put the date and the hour on a second line under some ticks, and at a phone's
// width those ran into each other.
const TIME_AXIS = {
  space: 64,
  values: (u, ticks) => ticks.map((t) => formatClock(t, ticks.length > 1 && ticks[1] - ticks[0] < 60)),
};

const COLORS = ['#2563eb', '#dc2626', '#16a34a', '#9333ea', '#ea580c', '#0891b2', '#ca8a04',
  '#db2777', '#4b5563', '#65a30d'];

// A time series chart. `times` are seconds since the epoch; each series is
// { label, values } with null for a gap. Redrawn in place when the data changes,
// resized with its container (so it fits a phone as well as a laptop). `format`
// writes the y axis' values (bytes as KiB, MiB...).
export function Chart({ times, series, label, height = 180, format = null }) {
  const box = useRef(null);
  const plot = useRef(null);
  const shape = series.map((s) => s.label).join('\u0000');

  useEffect(() => {
    // The element itself, not the ref: the ref is already null when an unmounted
    // chart's last resize callback runs.
    const element = box.current;
    const width = Math.max(element.clientWidth, 200);
    const options = {
      width,
      height,
      // Names only: values under the cursor would jump the layout on a phone.
      legend: { show: series.length > 1, live: false },
      scales: { x: { time: true }, y: { range: (u, min, max) => [0, Math.max(max, 1)] } },
      axes: [TIME_AXIS, format ? { label, size: 80, values: (u, ticks) => ticks.map(format) } : { label, size: 60 }],
      series: [{}, ...series.map((s, i) => ({
        label: s.label,
        stroke: COLORS[i % COLORS.length],
        width: 2,
        spanGaps: false,
        points: { show: false },
      }))],
    };
    const chart = new uPlot(options, [times, ...series.map((s) => s.values)], element);
    plot.current = chart;
    const observer = new ResizeObserver(() => {
      chart.setSize({ width: Math.max(element.clientWidth, 200), height });
    });
    observer.observe(element);
    return () => {
      observer.disconnect();
      chart.destroy();
      plot.current = null;
    };
  }, [shape, height, label]);

  useEffect(() => {
    if (plot.current) plot.current.setData([times, ...series.map((s) => s.values)]);
  }, [times, series]);

  return <div class="chart" ref={box} data-points={times.length} />;
}
