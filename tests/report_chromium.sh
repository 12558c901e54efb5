#!/usr/bin/env bash
# The HTML report renders in headless Chromium with no console errors and fetches nothing.
# Usage: report_chromium.sh REPORT.html [SCREENSHOT.png]
# Exit 77 (CTest: Skipped) where no chromium is installed; 1 on a console error, a failed
# resource load, an http(s) reference in the file, or a page that did not render.
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
[ -s "$tmp/shot.png" ] || { echo "FAIL: no screenshot written"; failures=$((failures + 1)); }
if [ -n "$shot" ] && [ -s "$tmp/shot.png" ]; then cp "$tmp/shot.png" "$shot"; fi
echo "report_chromium: $browser rendered $html ($svgs SVG charts in the DOM, screenshot $(stat -c %s "$tmp/shot.png" 2>/dev/null || echo 0) bytes); $failures failure(s)"
[ "$failures" -eq 0 ]
