#!/usr/bin/env bash
# Runs Pulumi YAML's language-conformance projects, unchanged, with keel on
# the simulated cloud, and prints one line per project.
#
#   scripts/pulumi-yaml-conformance.sh SOURCE [KEEL] [NAME...]
#
# SOURCE is a checkout of pulumi/pulumi-yaml, or a bare git directory of it
# (the projects are then extracted from its HEAD into a temporary
# directory); KEEL is the keel binary (default target/release/keel); NAMEs
# limit the run to those projects.
#
# What the upstream Go harness (pulumi/pulumi,
# pkg/testing/pulumi-test-language/tests) supplies beside a project is
# supplied here the same way: its stack configuration, the stack a
# `StackReference` reads, the object an `import` names (`keel cloud add`),
# a step's update options (`--target`), and the order of a multi-step
# project's numbered directories (each step an `up` on the same stack).
# A project passes when every step exits 0 and, where the upstream harness
# asserts outputs this script knows (`expect`), the stack's outputs are
# those. The `policy-*` projects test policy packs, which keel does not
# have: their programs run, and they are reported as passing the program
# only.
#
# KEEP=1 keeps the working directory (stacks, logs) and prints its path.
#
# Exit status: 0 when no project failed, 1 otherwise.
set -euo pipefail

src=${1:?usage: $0 SOURCE [KEEL] [NAME...]}
shift
keel=$(realpath "${1:-target/release/keel}")
[ $# -gt 0 ] && shift
rel=cmd/pulumi-language-yaml/testdata/projects

work=$(mktemp -d)
if [ -n "${KEEP:-}" ]; then
    echo "logs in $work"
else
    trap 'rm -rf "$work"' EXIT
fi
if [ -d "$src/$rel" ]; then
    projects=$(realpath "$src/$rel")
else
    git --git-dir="$src" archive HEAD "$rel" | tar -x -C "$work"
    projects=$work/$rel
fi

export KEEL_CONFIG_PASSPHRASE=conformance
export PULUMI_CONFIG_PASSPHRASE=conformance

# The stack configuration the upstream harness gives a project's first run.
configure() { # project dir
    local p=$1 d=$2
    c() { (cd "$d" && "$keel" --backend "$work/backend-$p" config set --stack test "$@" >/dev/null); }
    case $p in
    l1-builtin-base64) c input aGVsbG8gd29ybGQ= ;;
    l1-builtin-sha1) c input 'hello world' ;;
    l1-builtin-string) c aString foo-bar-baz ;;
    l1-builtin-list)
        c --path 'aList[0]' foo
        c --path 'aList[1]' bar
        c --path 'aList[2]' baz
        c aString foo-bar-baz
        c --path 'singleOrNoneList[0]' single ;;
    l1-builtin-secret)
        c --secret aSecret 'this is a secret'
        c notSecret 'this is plaintext' ;;
    l1-builtin-to-json)
        c aString hello
        c aNumber 42
        c --path 'aList[0]' one
        c --path 'aList[1]' two
        c --path 'aList[2]' three
        c --secret aSecret secretvalue ;;
    l1-proxy-index)
        c --path anObject.property config
        c --path anyObject.property dynamic ;;
    l1-builtin-require-pulumi-version) c version '>=3.0.0' ;;
    l2-logical-name) c 'cC-Charlie_charlie.😃⁉️' true ;;
    l2-resource-option-custom-timeouts) c createTimeout 7m ;;
    esac
}

# What else the harness prepares: the stack a reference reads.
prepare() { # project
    case $1 in
    l1-stack-reference)
        local o=$work/other
        mkdir -p "$o"
        printf 'name: other\nruntime: yaml\noutputs:\n  plain: plain\n  secret:\n    fn::secret: secret\n' >"$o/Pulumi.yaml"
        (cd "$o" && "$keel" --backend "$work/backend-$1" up --yes --stack dev) >"$work/$1.prep.log" 2>&1 ;;
    l2-resource-option-import)
        # The upstream test provider reads any ID; on the simulated cloud the
        # object must exist, made outside keel.
        "$keel" --backend "$work/backend-$1" cloud add simple:index:Resource fakeID123 \
            --property value=true >"$work/$1.prep.log" 2>&1 ;;
    esac
}

# The update options the upstream harness gives a step.
step_flags() { # project step
    case $1/$2 in
    l2-target-up-with-new-dependency/1) echo "--target=**targetOnly**" ;;
    esac
}

# The stack outputs the upstream harness asserts after the last step, as
# `keel stack output --json` prints them (a secret shows as "[secret]").
expect() { # project
    case $1 in
    l2-invoke-simple | l2-invoke-output-only) echo '{"hello":"hello world","goodbye":"goodbye world"}' ;;
    l2-invoke-options | l2-invoke-options-depends-on) echo '{"hello":"hello world"}' ;;
    l2-invoke-variants) echo '{"outputInput":"hello world","unit":"Hello world"}' ;;
    l2-invoke-multi-argument) echo '{"both":"hello world","onlyRequired":"hello"}' ;;
    l2-invoke-scalar) echo '{"scalar":true}' ;;
    l2-invoke-scalars) echo '{"secret":"[secret]","array":[false,false,true,false,false,true,false,false],"map":{"value":"hello world"},"secretMap":"[secret]"}' ;;
    l2-invoke-secrets) echo '{"nonSecret":"hello world","firstSecret":"[secret]","secondSecret":"[secret]"}' ;;
    l2-elide-index) echo '{"inv":"test world"}' ;;
    l2-parameterized-invoke) echo '{"parameterValue":"goodbyeHelloWorld"}' ;;
    l2-resource-invoke-dynamic-function) echo '{"dynamic":{"resultProperty":"resultValue"}}' ;;
    l1-stack-reference) echo '{"plain":"plain","secret":"[secret]"}' ;;
    esac
}

same_json() { # want got
    python3 -c 'import json,sys; sys.exit(json.loads(sys.argv[1]) != json.loads(sys.argv[2]))' "$1" "$2"
}

failed=0
passed=0
program_only=0
names=("$@")
[ ${#names[@]} -eq 0 ] && mapfile -t names < <(ls "$projects")
for p in "${names[@]}"; do
    dir=$projects/$p
    steps=("$dir")
    if [ ! -e "$dir/Pulumi.yaml" ]; then
        mapfile -t steps < <(find "$dir" -mindepth 1 -maxdepth 1 -type d -name '[0-9]*' | sort -V)
    fi
    log=$work/$p.log
    status=ok
    prepare "$p" || status="fail (prepare: $(tail -n 3 "$work/$p.prep.log" | tr '\n' ' '))"
    first=1
    for s in "${steps[@]}"; do
        [ "$status" = ok ] || break
        run=$work/run-$p
        rm -rf "$run" && cp -r "$s" "$run"
        if [ $first = 1 ]; then
            (cd "$run" && "$keel" --backend "$work/backend-$p" stack init test) >>"$log" 2>&1 || true
            configure "$p" "$run" >>"$log" 2>&1 || { status="fail (config)"; break; }
            first=0
        fi
        rc=0
        read -r -a flags <<<"$(step_flags "$p" "$(basename "$s")")"
        (cd "$run" && "$keel" --backend "$work/backend-$p" up --yes --stack test "${flags[@]}") >>"$log" 2>&1 || rc=$?
        if [ $rc -ne 0 ]; then
            status="step $(basename "$s") exited $rc: $(grep -v '^error: the update failed' "$log" | grep -m1 -i 'error' | cut -c1-240 || true)"
        fi
    done
    want=$(expect "$p")
    if [ "$status" = ok ] && [ -n "$want" ]; then
        got=$("$keel" --backend "$work/backend-$p" stack output --json --stack test 2>>"$log" || true)
        same_json "$want" "${got:-null}" || status="outputs $got, expected $want"
    fi
    if [ "$status" = ok ] && [[ $p == policy-* ]]; then
        echo "pass $p (the program only: keel applies no policy packs)"
        passed=$((passed + 1))
        program_only=$((program_only + 1))
    elif [ "$status" = ok ]; then
        echo "pass $p"
        passed=$((passed + 1))
    else
        echo "FAIL $p: $status"
        failed=$((failed + 1))
    fi
done
echo "passed $passed ($program_only of them the program only), failed $failed"
[ $failed -eq 0 ]
