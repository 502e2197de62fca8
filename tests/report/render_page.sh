#!/usr/bin/env bash
# Makes an HTML report with `ndtrace check --html` (or `diff --html`) and renders it in a real
# headless Chromium: the page must say it rendered (body data-rendered="ok"), log nothing to
# the browser console (no script error, no failed load: the page is self-contained), hold what
# the case expects, and its screenshot must not be blank.
#
# usage: render_page.sh NDTRACE OUT_DIR CASE -- CMD...
#   CASE: planted        check says NOT deterministic; the card, the histogram and red ops show
#         deterministic  check says deterministic; no diverged op is drawn
#         policy         check --deterministic: the policy table lists what was replaced, and
#                        the cost of determinism (GPU time of a plain run against a policy run)
# Exit 0 pass, 1 fail, 77 skipped (Chromium is not installed: tools/install-deps.sh installs it).
set -uo pipefail
ndtrace=$1 out=$2 case=$3
shift 3
[ "${1:-}" = "--" ] && shift
here=$(cd "$(dirname "$0")" && pwd)
chromium=$(command -v chromium || command -v chromium-browser || true)
if [ -z "$chromium" ]; then
  echo "SKIP: chromium is not installed"
  exit 77
fi
fail() { echo "FAIL: $*"; exit 1; }

rm -rf "$out"
mkdir -p "$out"
page=$out/report.html
options=()
[ "$case" = policy ] && options+=(--deterministic)
status=0
"$ndtrace" check -n 3 -o "$out/runs" --html "$page" "${options[@]}" -- "$@" >"$out/check.txt" 2>&1 || status=$?
case $case in
  planted) [ "$status" = 1 ] || fail "check exited $status, expected 1: $(tail -3 "$out/check.txt")" ;;
  *) [ "$status" = 0 ] || fail "check exited $status, expected 0: $(tail -3 "$out/check.txt")" ;;
esac
[ -s "$page" ] || fail "no page written"
if grep -Eq '<(script|link|img)[^>]+(src|href)=' "$page"; then
  fail "the page loads something from outside itself"
fi

browser=(timeout 120 "$chromium" --headless --no-sandbox --disable-gpu --disable-quic --no-first-run
         --disable-background-networking --disable-component-update --disable-sync
         --user-data-dir="$out/profile" --window-size=1280,1600 --enable-logging=stderr --v=0)
"${browser[@]}" --dump-dom "file://$page" >"$out/dom.html" 2>"$out/browser.log" ||
  fail "chromium --dump-dom failed: $(tail -3 "$out/browser.log")"
"${browser[@]}" --screenshot="$out/shot.png" "file://$page" >/dev/null 2>>"$out/browser.log" ||
  fail "chromium --screenshot failed: $(tail -3 "$out/browser.log")"
if grep -q ':CONSOLE' "$out/browser.log"; then
  fail "the browser console logged: $(grep ':CONSOLE' "$out/browser.log" | head -3)"
fi
grep -q '<body data-rendered="ok"' "$out/dom.html" || fail "the page did not finish rendering: $(grep -o 'data-error="[^"]*"' "$out/dom.html")"

read -r _ colours _ red < <(python3 "$here/png_colours.py" "$out/shot.png") || fail "cannot read the screenshot"
[ "$colours" -ge 16 ] || fail "the screenshot is (nearly) blank: $colours colours"
case $case in
  planted)
    grep -q 'class="badge"[^>]*>nondeterministic_op<' "$out/dom.html" || fail "no nondeterministic_op card"
    grep -q '<rect' "$out/dom.html" || fail "no histogram of element-wise differences"
    [ "$red" -gt 1000 ] || fail "no diverged op drawn in red ($red red pixels)"
    ;;
  deterministic)
    grep -q 'class="verdict good"' "$out/dom.html" || fail "the verdict is not shown as deterministic"
    grep -q 'No divergence' "$out/dom.html" || fail "the card does not say there is no divergence"
    [ "$red" -lt 400 ] || fail "a deterministic run's page has red beyond the legend swatch ($red pixels)"
    ;;
  policy)
    grep -q '<th>asked for</th>' "$out/dom.html" || fail "no table of what the policy replaced"
    grep -q 'whole run</strong>' "$out/dom.html" || fail "no cost of determinism on the page"
    grep -q '^cost of determinism (GPU time' "$out/check.txt" || fail "check printed no cost of determinism"
    ;;
esac
echo "PASS: $case page renders ($colours colours, $red red pixels)"
