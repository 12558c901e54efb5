#!/usr/bin/env bash
# Issue 18's acceptance for third-party kernels: does `attnbench validate`'s verdict separate a
# correct narrow kernel from broken ones? The fixtures are tests/plugins/narrow_plugin.c (a correct
# f32 BHSD kernel with causal masks of both alignments, key padding per batch, GQA and d_k != d_v,
# and one library per planted mistake, narrow_<mistake>) and tests/plugins/plain_plugin.c (f32,
# BHSD, MHA, no mask, supports() only n_q == n_k). The expectations are the issue's acceptance list:
#   - the correct narrow plugin: exit 0 on the default and quick sets; at least 40 default and 8
#     quick cases run; every property that can apply runs at least 100 draws, none gives up;
#   - the plain plugin: exit 0; at least 25 default and 6 quick cases run; at least 8 properties apply;
#   - every wrong variant: exit 1 on `validate --cases default` (among them the one corrupting one
#     row of a large case and the one declaring BSHD but reading BHSD);
#   - the diagnosis names all but two of the wrong variants (the issue: ten of twelve);
#   - every rerun command validate prints for a failure (four per variant, spread over what it
#     printed, and two property reruns), run as printed, exits 1 again with the
#     failure shown.
# It prints a table (variant, exit codes, cases run, what the diagnosis named) and the counts, so a
# failing run still says where the harness stands.
# First, the fixtures themselves: on tests/plugins/narrow_cases.txt (small f32 cases, each where one
# mistake shows, every row compared) the correct plugin passes and every variant but the two that
# need repeated calls or BSHD tensors fails, so a variant the sets miss is known to be wrong.
# Usage: narrow_plugins.sh ATTNBENCH PLUGIN_DIR MISTAKES WORK_DIR [PART]
#   MISTAKES: the variants' names, comma-separated (narrow_<name>.so in PLUGIN_DIR).
#   PART: all (the default), correct (the correct plugins only) or wrong (the variants of MISTAKES
#   only): CTest runs one correct part and the variants in two wrong parts side by side, since
#   one process takes minutes; a wrong part may leave one of its variants unnamed, so two parts
#   allow what one run of all allows (two).
# Environment: ATTN_NARROW_PROPERTY_CASES (the correct plugins' draws, default 100; the acceptance
# needs 100), ATTN_NARROW_WRONG_PROPERTY_CASES (each wrong variant's, default 20).
set -uo pipefail
here=$(dirname "$(realpath "$0")")
own_cases=$here/plugins/narrow_cases.txt
bin=$(realpath "$1") plugins=$(realpath "$2") mistakes=$3 work=$4 part=${5:-all}
case $part in all | correct | wrong) ;; *) echo "narrow_plugins.sh: PART must be all, correct or wrong, not '$part'" >&2; exit 2 ;; esac
runs() { [ "$part" = all ] || [ "$part" = "$1" ]; }  # runs correct|wrong: this part runs that section
correct_draws=${ATTN_NARROW_PROPERTY_CASES:-100}
wrong_draws=${ATTN_NARROW_WRONG_PROPERTY_CASES:-20}
rm -rf "$work" && mkdir -p "$work" && cd "$work" || exit 1
source "$here/cli_checks.sh"
start_all=$SECONDS

# validate NAME PLUGIN ARGS...: `attnbench validate` with its results in NAME/ and its streams in
# NAME.out/.err (cli_checks.sh's run); sets rc and the counts read back from NAME/*.json.
validate() {
  local name=$1 plugin=$2
  shift 2
  local start=$SECONDS
  run "$name" validate --plugin "$plugin" --out "$name" "$@"
  seconds=$((SECONDS - start))
  eval "$(counts "$name")"
}

# counts NAME: shell assignments from NAME/verify.json and NAME/properties.json (zeros where absent):
# cases_run (passed + failed), cases_failed, cases_total, and per property verdict the counts,
# properties_applied (not n/a), the fewest draws of an applied property and the n/a reasons.
counts() {
  python3 - "$1" <<'PY'
import json, os, shlex, sys
name = sys.argv[1]
out = {"cases_run": 0, "cases_failed": 0, "cases_total": 0, "held": 0, "failed_properties": 0, "gave_up": 0, "not_applicable": 0,
       "properties_applied": 0, "fewest_draws": 0, "draws": 0, "na_reasons": "", "gave_up_reasons": ""}
try:
    s = json.load(open(os.path.join(name, "verify.json")))["summary"]
    out.update(cases_run=s["passed"] + s["failed"], cases_failed=s["failed"], cases_total=s["cases"])
except (OSError, ValueError, KeyError):
    pass
def reasons(records, verdict):  # "N: message" per property with that verdict, one line each, distinct messages once
    lines = {}
    for r in records:
        if r["verdict"] == verdict:
            lines.setdefault(" ".join(r["message"].split())[:160], []).append(str(r["property"]))
    return "; ".join(f"{','.join(numbers)}: {message}" for message, numbers in lines.items())
try:
    records = json.load(open(os.path.join(name, "properties.json")))["records"]
    applied = [r for r in records if r["verdict"] != "not_applicable"]
    out.update(held=sum(r["verdict"] == "held" for r in records), failed_properties=sum(r["verdict"] == "failed" for r in records),
               gave_up=sum(r["verdict"] == "gave_up" for r in records), not_applicable=len(records) - len(applied),
               properties_applied=len(applied), fewest_draws=min((r["cases"] for r in applied), default=0),
               draws=sum(r["cases"] for r in applied),
               na_reasons=reasons(records, "not_applicable"), gave_up_reasons=reasons(records, "gave_up"))
except (OSError, ValueError, KeyError):
    pass
for key, value in out.items():
    print(f"{key}={shlex.quote(str(value))}")
PY
}

# at_least WHAT VALUE MINIMUM: a counted check.
at_least() {
  checks=$((checks + 1))
  if [ "$2" -lt "$3" ]; then fail "$1: $2, expected at least $3"; fi
}
expect_exit() {  # expect_exit WHAT CODE: the last validate exited with CODE (the log's tail if not)
  checks=$((checks + 1))
  if [ "$rc" -ne "$2" ]; then
    fail "$1: exit $rc, expected $2"
    show
  fi
}

# The diagnosis lines of a log that name a mistake (verify prints "diagnosis: ..." under a failed
# case and in the failure summary; "no known mistake matches" names none).
named_diagnoses() { sed -n 's/^ *diagnosis: //p' "$@" | grep -v '^no known mistake matches' | awk '!seen[$0]++'; }

# The commands validate printed to replay a failure, as printed: the lines "rerun: attnbench ...",
# "for this plugin: attnbench ..." and "the same problem under the pass rule: attnbench ...".
printed_reruns() { grep -hoE '(rerun|for this plugin|under the pass rule): attnbench .*' "$@" | sed 's/^[^:]*: //' | sort -u; }

IFS=, read -r -a variants <<<"$mistakes"
echo "== the fixtures on their own cases ($(grep -c '^b=' "$own_cases") f32 cases, no properties)"
own_correct_rc=-
if runs correct; then
  validate own_narrow_plugin "$plugins/narrow_plugin.so" --cases "$own_cases" --property-cases 0
  expect_exit "narrow_plugin --cases narrow_cases.txt" 0
  own_correct_rc=$rc
fi
runs wrong || variants=()
declare -A own_rc
own_named=0 own_failing=0
for variant in "${variants[@]}"; do
  validate "own_$variant" "$plugins/narrow_$variant.so" --cases "$own_cases" --property-cases 0
  own_rc[$variant]=$rc
  [ "$rc" -eq 1 ] && own_failing=$((own_failing + 1))
  case $variant in
    nondeterministic | bshd_read_as_bhsd) ;;  # one call per case, BHSD tensors: nothing to see here
    *) expect_exit "narrow_$variant --cases narrow_cases.txt (the fixture is wrong where it should be)" 1 ;;
  esac
  [ -n "$(named_diagnoses "own_$variant.out")" ] && own_named=$((own_named + 1))
done
echo "  the correct plugin: exit $own_correct_rc; variants exiting 1: $own_failing of ${#variants[@]}; named by the diagnosis: $own_named"

echo "== the correct plugins (properties: $correct_draws draws each)"
correct_row() {  # the summary line of a correct plugin's run
  printf '  %-24s %-7s exit %s in %3d s: cases run %3s of %3s; properties applied %2s (held %s, failed %s, gave up %s, n/a %s), fewest draws %s, draws %s\n' \
    "$1" "$2" "$rc" "$seconds" "$cases_run" "$cases_total" "$properties_applied" "$held" "$failed_properties" "$gave_up" "$not_applicable" \
    "$fewest_draws" "$draws"
  [ -n "$na_reasons" ] && echo "      n/a: $na_reasons"
  [ -n "$gave_up_reasons" ] && echo "      gave up: $gave_up_reasons"
  return 0
}
# The property suite once per plugin (with the default set): the draws do not depend on the set.
sets=(quick default)
runs correct || sets=()
for set in "${sets[@]}"; do
  set_draws=$([ $set = default ] && echo "$correct_draws" || echo 0)
  validate "narrow_$set" "$plugins/narrow_plugin.so" --cases "$set" --property-cases "$set_draws"
  correct_row narrow_plugin "$set"
  expect_exit "narrow_plugin --cases $set" 0
  at_least "narrow_plugin: $set cases run" "$cases_run" "$([ $set = quick ] && echo 8 || echo 40)"
  if [ "$set_draws" -gt 0 ]; then
    checks=$((checks + 1))
    [ "$gave_up" -eq 0 ] || fail "narrow_plugin --cases $set: $gave_up properties gave up ($gave_up_reasons)"
    at_least "narrow_plugin --cases $set: the fewest draws of an applied property" "$fewest_draws" 100
  fi

  validate "plain_$set" "$plugins/plain_plugin.so" --cases "$set" --property-cases "$set_draws"
  correct_row plain_plugin "$set"
  expect_exit "plain_plugin --cases $set" 0
  at_least "plain_plugin: $set cases run" "$cases_run" "$([ $set = quick ] && echo 6 || echo 25)"
  [ "$set_draws" -gt 0 ] && at_least "plain_plugin --cases $set: properties that apply" "$properties_applied" 8
done

echo "== the wrong variants (properties: $wrong_draws draws each)"
named=0
declare -A table
for variant in "${variants[@]}"; do
  plugin="$plugins/narrow_$variant.so"
  validate "${variant}_quick" "$plugin" --cases quick --property-cases 0
  quick_rc=$rc quick_run=$cases_run quick_failed=$cases_failed
  validate "${variant}_default" "$plugin" --cases default --property-cases "$wrong_draws"
  expect_exit "narrow_$variant --cases default" 1
  diagnosis=$(named_diagnoses "${variant}_quick.out" "${variant}_default.out" | head -n 1)
  [ -n "$diagnosis" ] && named=$((named + 1))
  table[$variant]=$(printf '%-26s %5s %5s %5s %9s %9s %8s %6s  %s' "$variant" "${own_rc[$variant]}" "$quick_rc" "$rc" "$quick_run/$quick_failed" \
    "$cases_run/$cases_failed" "$failed_properties" "$seconds" "${diagnosis:--}")
  echo "  ${table[$variant]}"
done
unnamed_allowed=$([ "$part" = all ] && echo 2 || echo 1)
if [ ${#variants[@]} -gt 0 ]; then
  checks=$((checks + 1))
  [ "$named" -ge $((${#variants[@]} - unnamed_allowed)) ] ||
    fail "the diagnosis named $named of ${#variants[@]} wrong variants, expected at least $((${#variants[@]} - unnamed_allowed))"
fi

# Every printed rerun, run as printed (`attnbench` is this build's) from its own directory, must
# fail again: exit 1, and its output shows a failed case or a failed property.
echo "== the printed rerun commands"
attnbench() { "$bin" "$@"; }
reruns=0 reproduced=0
for variant in "${variants[@]}"; do
  # At most four per variant, spread over what was printed (the property reruns first): each is a
  # process of its own, and a variant failing a hundred cases prints a hundred.
  mapfile -t printed < <(printed_reruns "own_$variant.out" "${variant}_quick.out" "${variant}_default.out")
  commands=()
  step=$(( (${#printed[@]} + 3) / 4 ))
  for ((k = 0; k < ${#printed[@]}; k += step > 0 ? step : 1)); do commands+=("${printed[$k]}"); done
  mapfile -t property_reruns < <(printf '%s\n' "${printed[@]}" | grep -e '--property ' | head -n 2)
  for c in "${property_reruns[@]}"; do [[ " ${commands[*]} " == *" $c "* ]] || commands+=("$c"); done
  variant_reproduced=0
  for k in "${!commands[@]}"; do
    dir="rerun_${variant}_$k"
    mkdir -p "$dir"
    (cd "$dir" && eval "${commands[$k]}") >"$dir.out" 2>&1
    rerun_rc=$?
    reruns=$((reruns + 1))
    checks=$((checks + 1))
    if [ "$rerun_rc" -eq 1 ] && grep -qE '^[0-9]+ passed, [1-9][0-9]* failed|FAILED:' "$dir.out"; then
      reproduced=$((reproduced + 1)) variant_reproduced=$((variant_reproduced + 1))
    else
      fail "narrow_$variant: the printed rerun did not reproduce the failure (exit $rerun_rc): ${commands[$k]}"
      sed 's/^/    | /' "$dir.out" | tail -n 5
    fi
  done
  echo "  $variant: ${#printed[@]} printed, ${#commands[@]} run, $variant_reproduced reproduced"
done

echo
echo "== summary (exit codes on the own cases, quick, default; cases run/failed on quick, default; properties failed at $wrong_draws"
echo "   draws on default; its seconds; the first mistake the diagnosis named on quick or default)"
printf '%-26s %5s %5s %5s %9s %9s %8s %6s  %s\n' variant own quick dflt quick dflt props dflt_s diagnosis
for variant in "${variants[@]}"; do echo "${table[$variant]}"; done
echo
echo "wrong variants: ${#variants[@]}; named by the diagnosis on the quick and default sets: $named (on the fixtures' own cases: $own_named)"
echo "printed rerun commands: $reruns; reproduced: $reproduced"
echo "total time: $((SECONDS - start_all)) s"
[ "$checks" -gt 0 ] || fail "part $part ran no check"
finish "narrow_plugins ($part)"
