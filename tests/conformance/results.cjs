#!/usr/bin/env node
// Reads what the MCP conformance suite wrote, for tests/conformance/run.sh.
//
//   node results.cjs scenarios DEPS REVISION [server|client]
//       The scenarios of one leg (default server) that `conformance server|client
//       --requirements REVISION` runs (the required ones, then the not-scored ones),
//       one per line, from the suite's own requirements/REVISION.yaml.
//   node results.cjs verdicts OUTDIR SCENARIOS_FILE [server|client]
//       One line per scenario of SCENARIOS_FILE: NAME<TAB>pass|fail|skip<TAB>reason.
//       OUTDIR is the suite's --output-dir: one directory per scenario holding
//       checks.json (an array of checks with `status` SUCCESS, FAILURE, WARNING,
//       INFO or SKIPPED), named `server-<scenario>-<ISO timestamp>` for the server
//       leg and `<scenario>-<ISO timestamp>` for the client leg (where `auth/x`
//       nests as `auth/x-<timestamp>`). A scenario fails when any check is FAILURE,
//       as the suite itself counts it; WARNING does not fail (a passing scenario's
//       reason then counts its warnings). A pass needs at least one check that
//       passed (SUCCESS or WARNING): a scenario that recorded no check, or whose
//       directory is missing (the suite never ran it), fails; one whose checks
//       were all SKIPPED (or INFO) is `skip`, which run.sh accepts only for the
//       scenarios suite-skips.txt names.
'use strict';

const fs = require('fs');
const path = require('path');

function scenarios(deps, revision, leg) {
  const pkg = path.join(deps, 'node_modules', '@modelcontextprotocol', 'conformance');
  const yaml = require(path.join(deps, 'node_modules', 'yaml'));
  const set = yaml.parse(fs.readFileSync(path.join(pkg, 'requirements', `${revision}.yaml`), 'utf8'));
  const names = [...(set[leg] || [])];
  for (const entry of set.not_scored || []) {
    if (entry.leg === leg) names.push(entry.scenario);
  }
  if (names.length === 0) throw new Error(`requirements/${revision}.yaml lists no ${leg} scenario`);
  return names;
}

const TIMESTAMP = /-\d{4}-\d{2}-\d{2}T\d{2}-\d{2}-\d{2}-\d{3}Z$/;

function oneLine(text) {
  const flat = String(text).replace(/\s+/g, ' ').trim();
  return flat.length > 240 ? `${flat.slice(0, 237)}...` : flat;
}

// The result directories under outDir (one level of nesting: `auth/x-<ts>`), as
// [scenario name, directory] pairs.
function resultDirs(outDir, leg) {
  const found = [];
  const prefix = leg === 'server' ? 'server-' : '';
  const walk = (dir, group, depth) => {
    for (const entry of fs.existsSync(dir) ? fs.readdirSync(dir, { withFileTypes: true }) : []) {
      if (!entry.isDirectory()) continue;
      const full = path.join(dir, entry.name);
      if (TIMESTAMP.test(entry.name) && entry.name.startsWith(prefix)) {
        found.push([group + entry.name.slice(prefix.length).replace(TIMESTAMP, ''), full]);
      } else if (depth === 0 && leg === 'client') {
        walk(full, `${entry.name}/`, 1);
      }
    }
  };
  walk(outDir, '', 0);
  return found;
}

function verdicts(outDir, scenarioFile, leg) {
  const wanted = fs.readFileSync(scenarioFile, 'utf8').split('\n').filter(Boolean);
  const checks = new Map();
  for (const [name, dir] of resultDirs(outDir, leg)) {
    const file = path.join(dir, 'checks.json');
    if (!fs.existsSync(file)) continue;
    const list = JSON.parse(fs.readFileSync(file, 'utf8'));
    checks.set(name, [...(checks.get(name) || []), ...(Array.isArray(list) ? list : [])]);
  }
  const lines = [];
  for (const name of wanted) {
    const list = checks.get(name);
    if (list === undefined) {
      lines.push(`${name}\tfail\tno result: the suite did not run this scenario (see its log)`);
      continue;
    }
    const failed = list.filter((c) => c.status === 'FAILURE');
    const passed = list.filter((c) => c.status === 'SUCCESS' || c.status === 'WARNING');
    if (list.length === 0) {
      lines.push(`${name}\tfail\tno checks: the suite ran this scenario and recorded nothing`);
    } else if (failed.length === 0 && passed.length === 0) {
      const skipped = list.find((c) => c.status === 'SKIPPED');
      const why = skipped ? skipped.errorMessage || skipped.description || '' : 'only INFO checks';
      lines.push(`${name}\tskip\t${oneLine(`${list.length} check(s), none run: ${why}`)}`);
    } else if (failed.length === 0) {
      const warned = list.filter((c) => c.status === 'WARNING').map((c) => c.id);
      lines.push(`${name}\tpass\t${warned.length ? oneLine(`warnings: ${warned.join(', ')}`) : ''}`);
    } else {
      const first = failed[0];
      const more = failed.length > 1 ? ` (+${failed.length - 1} more failed checks)` : '';
      lines.push(`${name}\tfail\t${oneLine(`${first.id}: ${first.errorMessage || first.description || ''}`)}${more}`);
    }
  }
  return lines;
}

const [command, a, b, leg = 'server'] = process.argv.slice(2);
try {
  if (leg !== 'server' && leg !== 'client') throw new Error(`leg must be server or client, not ${leg}`);
  if (command === 'scenarios' && a && b) console.log(scenarios(a, b, leg).join('\n'));
  else if (command === 'verdicts' && a && b) console.log(verdicts(a, b, leg).join('\n'));
  else {
    console.error('usage: results.cjs scenarios DEPS REVISION [server|client] | verdicts OUTDIR SCENARIOS_FILE [server|client]');
    process.exit(2);
  }
} catch (e) {
  console.error(`results.cjs: ${e.message}`);
  process.exit(1);
}
