# Sourced by the shell tests of the attnbench command (cli_contract.sh, report_cli.sh,
# file_route/*.sh): counting checks and failures, running attnbench with its streams kept, and
# the exit-code check. Set bin (the attnbench path) and cd into a scratch directory first
# (enter_scratch_dir); the streams of run NAME land in NAME.out and NAME.err there.
failures=0
checks=0

absolute() {  # absolute PATH: PATH made absolute against the directory the test started in
  case $1 in /*) echo "$1" ;; *) echo "$PWD/$1" ;; esac
}

enter_scratch_dir() {  # a fresh directory, removed on exit, as the working directory ($tmp)
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  cd "$tmp" || exit 2
}

expect_file_has() {  # expect_file_has FILE TEXT: FILE contains TEXT (a fixed string)
  checks=$((checks + 1))
  grep -qF -- "$2" "$1" || { fail "$1 lacks '$2'"; tail -n 25 "$1" | sed 's/^/    ! /'; }
}

fail() {
  echo "FAIL: $*"
  failures=$((failures + 1))
}

check() {  # check DESCRIPTION COMMAND...: the command succeeds
  local what=$1
  shift
  checks=$((checks + 1))
  "$@" || fail "$what"
}

run() {  # run NAME ARGS...: attnbench with stdout/stderr in NAME.out/NAME.err, exit code in $rc
  local name=$1
  shift
  "$bin" "$@" >"$name.out" 2>"$name.err"
  rc=$?
  last=$name
}

show() {  # the tail of the last run's streams
  echo "  command output (stdout, then stderr) of '$last':"
  sed 's/^/    | /' "$last.out" | tail -n 20
  sed 's/^/    ! /' "$last.err" | tail -n 20
}

expect_rc() {  # expect_rc CODE: the last run exited with CODE
  checks=$((checks + 1))
  if [ "$rc" -ne "$1" ]; then
    fail "$last: exit code $rc, expected $1"
    show
    return 1
  fi
}

finish() {  # finish NAME: the summary line; the exit status says whether every check held
  echo "$1: $checks checks, $failures failed"
  [ "$failures" -eq 0 ]
}
