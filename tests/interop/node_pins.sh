# Sourced by tests/interop/run.sh and tests/interop/peers.sh: installs npm packages at
# pinned versions into a prefix, once. The caller defines `fail MESSAGE`.
#
#   npm_install_pinned LABEL DIR name@version...

# The version of the package whose package.json is at $1, or nothing.
installed_version() {
    node -e 'try { console.log(require(process.argv[1]).version) } catch (e) { console.log("") }' "$1"
}

# Whether every `name@version` after DIR is installed under DIR at that version.
node_pins_installed() {
    local dir="$1" pin name version
    shift
    for pin in "$@"; do
        name="${pin%@*}"
        version="${pin##*@}"
        [ "$(installed_version "$dir/node_modules/$name/package.json")" = "$version" ] || return 1
    done
}

npm_install_pinned() {
    local label="$1" dir="$2"
    shift 2
    if node_pins_installed "$dir" "$@"; then
        echo "== $label: $* up to date"
        return
    fi
    echo "== $label: npm install $*"
    mkdir -p "$dir"
    timeout 600 npm install --prefix "$dir" --save-exact --no-audit --no-fund --no-update-notifier \
        --loglevel=error "$@" < /dev/null \
        || fail "npm install $* failed (is the npm registry reachable?)"
    node_pins_installed "$dir" "$@" || fail "not every one of $* found in $dir after npm install"
}
