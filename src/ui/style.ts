/**
 * The audit view's stylesheet, served as `/ui/assets/view.css` (kept in a module so that the
 * build is tsc alone and the package ships it with the code). System fonts only: nothing is
 * fetched from elsewhere. Outcome colours pair with shapes (./client/draw.ts), so the timeline
 * reads in greyscale too.
 */
export const STYLE = `
:root { --fg: #1f2328; --muted: #59636e; --line: #d1d9e0; --bg: #fff; --soft: #f6f8fa; --accent: #0550ae;
  --forwarded: #1a7f37; --replayed: #0969da; --stale: #cf222e; --in-flight: #9a6700; --unknown: #8250df;
  --duplicate: #82071e; --overtaken: #953800; --refused: #59636e; --operator: #1f2328; color-scheme: light; }
* { box-sizing: border-box; }
body { margin: 0; font: 15px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; color: var(--fg); background: var(--bg); }
a { color: var(--accent); }
:focus-visible { outline: 3px solid #fb8f44; outline-offset: 2px; }
.skip { position: absolute; left: -999px; }
.skip:focus { left: 8px; top: 8px; background: var(--bg); padding: 4px 8px; z-index: 2; }
header { display: flex; flex-wrap: wrap; gap: 8px 20px; align-items: center; padding: 10px 20px; border-bottom: 1px solid var(--line); background: var(--soft); }
.brand { font-weight: 700; color: var(--fg); text-decoration: none; }
nav ul { display: flex; flex-wrap: wrap; gap: 4px 14px; list-style: none; margin: 0; padding: 0; }
nav a[aria-current=page] { font-weight: 700; color: var(--fg); text-decoration-thickness: 3px; }
.token { display: flex; flex-wrap: wrap; align-items: center; gap: 6px; margin-left: auto; }
.token .help { flex-basis: 100%; text-align: right; }
.help { color: var(--muted); font-size: 13px; }
input, textarea, button { font: inherit; }
input, textarea { border: 1px solid #8c959f; border-radius: 4px; padding: 3px 6px; }
button { border: 1px solid #8c959f; border-radius: 4px; background: var(--bg); padding: 3px 10px; cursor: pointer; }
button:hover { background: var(--soft); }
main { padding: 12px 20px 40px; max-width: 1280px; }
main p, main li, td { overflow-wrap: anywhere; }
td { min-width: 4.5em; }
table.entries code { white-space: nowrap; }
h1 { margin: 4px 0; font-size: 24px; }
h2 { font-size: 18px; margin: 22px 0 6px; }
h3 { font-size: 15px; margin: 14px 0 4px; }
.lead { color: var(--muted); margin-top: 0; }
.banner { margin: 0; padding: 8px 20px; background: #fff8c5; border-bottom: 1px solid #d4a72c; }
.error { color: var(--stale); font-weight: 600; }
#status:empty { display: none; }
#status { padding: 6px 10px; border-left: 4px solid var(--accent); background: var(--soft); margin: 8px 0; }
#status.error { border-color: var(--stale); }
.follow { display: flex; flex-wrap: wrap; gap: 6px 10px; align-items: center; margin: 8px 0 12px; }
.scroll { overflow-x: auto; max-width: 100%; }
table { border-collapse: collapse; font-size: 14px; }
th, td { text-align: left; padding: 4px 8px; border-bottom: 1px solid var(--line); vertical-align: top; }
th { background: var(--soft); white-space: nowrap; }
th button { border: 0; background: none; padding: 0; font-weight: 700; }
th[aria-sort=ascending] button::after { content: " \\25B2"; }
th[aria-sort=descending] button::after { content: " \\25BC"; }
td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; }
code, .mono { font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; font-size: 13px; overflow-wrap: anywhere; }
.route { border: 1px solid var(--line); border-radius: 6px; padding: 4px 14px 10px; margin: 14px 0; }
.cols { display: grid; grid-template-columns: minmax(0, 1fr) minmax(0, 1.3fr); gap: 0 28px; }
@media (max-width: 760px) { .cols { grid-template-columns: 1fr; } header { padding: 8px 10px; } main { padding: 8px 10px 30px; } .token { margin-left: 0; } .token .help { text-align: left; } }
ul.claim { margin: 2px 0 6px; padding-left: 20px; }
.badge { display: inline-block; min-width: 46px; text-align: center; border-radius: 10px; padding: 0 6px; font-size: 12px; font-weight: 700; color: #fff; }
.badge.ok { background: var(--forwarded); } .badge.risk { background: var(--stale); } .badge.unknown { background: var(--refused); }
dl.facts { display: grid; grid-template-columns: max-content 1fr; gap: 2px 12px; margin: 6px 0; }
dl.facts dt { color: var(--muted); } dl.facts dd { margin: 0; }
.warn { border-left: 4px solid #d4a72c; background: #fff8c5; padding: 4px 10px; margin: 4px 0; }
dialog { max-width: min(560px, 96vw); border: 1px solid var(--line); border-radius: 8px; }
dialog::backdrop { background: rgba(0, 0, 0, .35); }
dialog form > label, dialog textarea, dialog input[type=password] { display: block; width: 100%; margin-top: 6px; }
dialog fieldset label { display: block; margin: 4px 0; }
.actions { display: flex; gap: 8px; margin-top: 10px; }
svg.timeline { display: block; min-width: 720px; width: 100%; height: auto; font-size: 12px; }
svg text { fill: var(--fg); }
svg .axis line, svg .grid { stroke: var(--line); }
svg .lane-bg { fill: var(--soft); }
svg .lane-label { font-weight: 600; }
svg .req { fill: #afb8c1; }
svg .tenure { fill: #ddf4ff; stroke: #54aeff; stroke-dasharray: 4 3; }
svg .lease-bar { fill: #0969da; }
svg line.late { stroke-width: 1.5; stroke-dasharray: 3 3; }
svg .claim-lease { fill: none; stroke: var(--unknown); stroke-dasharray: 2 2; }
svg .effect { fill: #8c959f; } svg .effect.unknown { fill: #d8b9ff; stroke: var(--unknown); } svg .effect.duplicate { fill: #ffcecb; stroke: var(--duplicate); }
svg .mark-line { fill: none; stroke: var(--fg); stroke-width: 2; }
svg .link { stroke: #8c959f; stroke-dasharray: 2 3; }
svg .axis-break rect { fill: var(--soft); stroke: var(--line); stroke-dasharray: 6 4; } svg .axis-break text { fill: var(--muted); }
.o-forwarded { fill: var(--forwarded); stroke: var(--forwarded); } .o-replayed { fill: var(--replayed); stroke: var(--replayed); }
.o-stale { fill: var(--stale); stroke: var(--stale); } .o-in_flight { fill: var(--in-flight); stroke: var(--in-flight); }
.o-unknown { fill: var(--unknown); stroke: var(--unknown); } .o-duplicate { fill: #fff; stroke: var(--duplicate); }
.o-lease { fill: #0969da; stroke: #0969da; }
.o-overtaken { fill: var(--overtaken); stroke: var(--overtaken); } .o-refused { fill: var(--refused); stroke: var(--refused); }
.o-resolve { fill: var(--operator); stroke: var(--operator); }
.o-probe { fill: #fff; stroke: var(--operator); stroke-width: 2; } .o-settled { fill: var(--forwarded); stroke: var(--operator); stroke-width: 2; }
svg .o-stale, svg .o-duplicate { stroke-width: 3; }
ul.legend { display: flex; flex-wrap: wrap; gap: 4px 16px; list-style: none; padding: 0; margin: 6px 0; font-size: 13px; }
ul.legend svg { vertical-align: middle; }
svg.chart { display: block; max-width: 100%; height: auto; font-size: 11px; }
svg.chart .bar { fill: var(--replayed); } svg.chart .bar.late { fill: var(--stale); }
svg.chart .lease { stroke: var(--stale); stroke-width: 2; stroke-dasharray: 5 3; }
`
