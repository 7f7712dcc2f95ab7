#!/usr/bin/env node
// Reads what the MCP conformance suite wrote, for tests/conformance/run.sh.
//
//   node results.cjs scenarios DEPS REVISION
//       The server scenarios `conformance server --requirements REVISION` runs (the
//       required ones, then the not-scored ones), one per line, from the suite's
//       own requirements/REVISION.yaml.
//   node results.cjs verdicts OUTDIR SCENARIOS_FILE
//       One line per scenario of SCENARIOS_FILE: NAME<TAB>pass|fail<TAB>reason.
//       OUTDIR is the suite's --output-dir: one directory per scenario,
//       `server-<scenario>-<ISO timestamp>`, holding checks.json (an array of checks
//       with `status` SUCCESS, FAILURE, WARNING, INFO or SKIPPED). A scenario fails
//       when any check is FAILURE, as the suite itself counts it; WARNING does not
//       fail. A scenario without a directory failed (the suite never ran it).
'use strict';

const fs = require('fs');
const path = require('path');

function scenarios(deps, revision) {
  const pkg = path.join(deps, 'node_modules', '@modelcontextprotocol', 'conformance');
  const yaml = require(path.join(deps, 'node_modules', 'yaml'));
  const set = yaml.parse(fs.readFileSync(path.join(pkg, 'requirements', `${revision}.yaml`), 'utf8'));
  const names = [...(set.server || [])];
  for (const entry of set.not_scored || []) {
    if (entry.leg === 'server') names.push(entry.scenario);
  }
  if (names.length === 0) throw new Error(`requirements/${revision}.yaml lists no server scenario`);
  return names;
}

const TIMESTAMP = /-\d{4}-\d{2}-\d{2}T\d{2}-\d{2}-\d{2}-\d{3}Z$/;

function oneLine(text) {
  const flat = String(text).replace(/\s+/g, ' ').trim();
  return flat.length > 240 ? `${flat.slice(0, 237)}...` : flat;
}

function verdicts(outDir, scenarioFile) {
  const wanted = fs.readFileSync(scenarioFile, 'utf8').split('\n').filter(Boolean);
  const checks = new Map();
  for (const entry of fs.existsSync(outDir) ? fs.readdirSync(outDir) : []) {
    if (!entry.startsWith('server-') || !TIMESTAMP.test(entry)) continue;
    const file = path.join(outDir, entry, 'checks.json');
    if (!fs.existsSync(file)) continue;
    const name = entry.slice('server-'.length).replace(TIMESTAMP, '');
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
    if (failed.length === 0) {
      lines.push(`${name}\tpass\t`);
    } else {
      const first = failed[0];
      const more = failed.length > 1 ? ` (+${failed.length - 1} more failed checks)` : '';
      lines.push(`${name}\tfail\t${oneLine(`${first.id}: ${first.errorMessage || first.description || ''}`)}${more}`);
    }
  }
  return lines;
}

const [command, a, b] = process.argv.slice(2);
try {
  if (command === 'scenarios' && a && b) console.log(scenarios(a, b).join('\n'));
  else if (command === 'verdicts' && a && b) console.log(verdicts(a, b).join('\n'));
  else {
    console.error('usage: results.cjs scenarios DEPS REVISION | verdicts OUTDIR SCENARIOS_FILE');
    process.exit(2);
  }
} catch (e) {
  console.error(`results.cjs: ${e.message}`);
  process.exit(1);
}
