#!/usr/bin/env bash
# The HTML report renders in headless Chromium with no console errors and fetches nothing; no
# text overflows its box or the page, no chart's text lies outside it (a legend cut off), and every
# error chart has its pass line (report_layout_check.html.inc, injected into a copy).
# Usage: report_chromium.sh REPORT.html [SCREENSHOT.png]
# Exit 77 (CTest: Skipped) where no chromium is installed; 1 on a console error, a failed
# resource load, an http(s) reference in the file, a page that did not render, or a layout problem.
set -u
html=${1:?usage: report_chromium.sh REPORT.html [SCREENSHOT.png]}
shot=${2:-}
[ -s "$html" ] || { echo "report_chromium: $html is missing or empty (report_cli writes it)"; exit 1; }
case $html in /*) ;; *) html=$PWD/$html ;; esac

browser=
for candidate in chromium chromium-browser google-chrome; do
  if command -v "$candidate" >/dev/null 2>&1; then browser=$(command -v "$candidate"); break; fi
done
if [ -z "$browser" ]; then
  echo "report_chromium: skipped: no chromium on PATH (Debian: apt-get install chromium)"
  exit 77
fi

failures=0
if grep -nE 'https?://' "$html" | head -n 5 | grep .; then
  echo "FAIL: $html refers to the network (lines above)"
  failures=$((failures + 1))
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
flags=(--headless --disable-gpu --no-sandbox --no-first-run --no-default-browser-check --disable-extensions
       --user-data-dir="$tmp/profile" --enable-logging=stderr --v=0 --window-size=1280,2400 --virtual-time-budget=2000)
timeout 120 "$browser" "${flags[@]}" --dump-dom "file://$html" >"$tmp/dom.html" 2>"$tmp/dom.err"
dom_rc=$?
timeout 120 "$browser" "${flags[@]}" --screenshot="$tmp/shot.png" "file://$html" >"$tmp/shot.out" 2>"$tmp/shot.err"
shot_rc=$?
if [ "$dom_rc" -ne 0 ] || [ "$shot_rc" -ne 0 ]; then
  echo "FAIL: chromium exited $dom_rc (--dump-dom) and $shot_rc (--screenshot)"
  tail -n 20 "$tmp/dom.err" "$tmp/shot.err"
  failures=$((failures + 1))
fi
# Console messages of the page (there is no script, so any is a fault), uncaught errors and
# resources that failed to load.
if grep -hE 'CONSOLE|Uncaught|Failed to load resource|net::ERR_' "$tmp/dom.err" "$tmp/shot.err" | grep .; then
  echo "FAIL: console errors or failed loads (above)"
  failures=$((failures + 1))
fi
for part in '<svg' 'Verdicts per implementation' 'Why the scale is 1/√d_k' '</html>'; do
  grep -qF -- "$part" "$tmp/dom.html" || { echo "FAIL: the rendered DOM lacks '$part'"; failures=$((failures + 1)); }
done
svgs=$(grep -o '<svg' "$tmp/dom.html" | wc -l)

# Layout, with a script injected into copies (the report has none): no text overflowing its box or
# the page, no SVG text outside its chart (a legend cut off), a pass line in every error chart.
# First on a page made to fail each way, so that the check is seen to catch them.
checker=$(dirname "$0")/report_layout_check.html.inc
layout_problems() {  # HTML_FILE -> the checker's JSON line
  local copy="$tmp/checked-$(basename "$1")"
  python3 - "$1" "$checker" "$copy" <<'PY'
import sys
page, checker, copy = sys.argv[1:4]
text = open(page, encoding="utf-8").read()
inject = open(checker, encoding="utf-8").read()
at = text.rfind("</body>")
open(copy, "w", encoding="utf-8").write(text[:at] + inject + text[at:] if at >= 0 else text + inject)
PY
  timeout 120 "$browser" "${flags[@]}" --dump-dom "file://$copy" 2>/dev/null | grep -o 'SELFCHECK {.*}' | head -n 1
}
cat >"$tmp/broken.html" <<'HTML'
<!DOCTYPE html><html><body style="margin:0">
<svg width="200" height="100" viewBox="0 0 200 100" aria-label="Error budget used vs n, f16"><text x="150" y="50" font-size="11">a legend entry cut off at the edge</text></svg>
<div style="width:100px;overflow:hidden;white-space:nowrap">a cell whose text is far wider than its box</div>
</body></html>
HTML
broken=$(layout_problems "$tmp/broken.html")
for want in 'text outside its chart' 'error chart without a pass line' 'clipped:'; do
  grep -qF -- "$want" <<<"$broken" || { echo "FAIL: the layout check missed '$want' on a page made to show it: ${broken:-no output}"; failures=$((failures + 1)); }
done
layout=$(layout_problems "$html")
if [ -z "$layout" ]; then
  echo "FAIL: the layout check produced nothing for $html"
  failures=$((failures + 1))
elif ! grep -qF '"problems":[]' <<<"$layout"; then
  echo "FAIL: layout problems in $html: $layout"
  failures=$((failures + 1))
else
  echo "layout: ${layout#SELFCHECK }"
fi
[ -s "$tmp/shot.png" ] || { echo "FAIL: no screenshot written"; failures=$((failures + 1)); }
if [ -n "$shot" ] && [ -s "$tmp/shot.png" ]; then cp "$tmp/shot.png" "$shot"; fi
echo "report_chromium: $browser rendered $html ($svgs SVG charts in the DOM, screenshot $(stat -c %s "$tmp/shot.png" 2>/dev/null || echo 0) bytes); $failures failure(s)"
[ "$failures" -eq 0 ]
