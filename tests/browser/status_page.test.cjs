// The status page end to end in headless Chromium (driven by playwright-core).
// Started by tests/browser/run.sh, which starts the server (tether, or the fake with
// --fake) and passes everything through the environment:
//
//   STATUS_URL        the server's base URL (http://127.0.0.1:PORT)
//   STATUS_TOKEN      its bearer token
//   STATUS_CRASH      the backend to crash (through POST /mcp, tool <server>__crash)
//   STATUS_OTHER      a backend that stays online
//   STATUS_MODE       real (tether) or fake (fake_status_server.cjs: one more step)
//   CHROMIUM          the browser binary
//   PLAYWRIGHT_CORE   the installed playwright-core package directory
//   BROWSER_OUT       where screenshots go
//   CHROMIUM_PID_FILE where the browser's pid is written (run.sh kills it on exit)
//
// Prints one `ok - STEP` or `FAIL: STEP: why` line per step (with the page's text
// and the table's HTML after a failure), then `browser: N passed, N failed`.
"use strict";
const fs = require("fs");
const path = require("path");

const env = (name) => {
    const v = process.env[name];
    if (!v) {
        console.log(`FAIL: setup: ${name} is not set`);
        process.exit(2);
    }
    return v;
};
const BASE = env("STATUS_URL");
const TOKEN = env("STATUS_TOKEN");
const CRASH = env("STATUS_CRASH");
const OTHER = env("STATUS_OTHER");
const OUT = env("BROWSER_OUT");
const MODE = process.env.STATUS_MODE || "real";
const { chromium } = require(env("PLAYWRIGHT_CORE"));

const row = (server) => `tr[data-server="${server}"]`;
let passed = 0;
let failed = 0;
let page = null;

class StepFailed extends Error {}
const check = (cond, why) => {
    if (!cond) throw new StepFailed(why);
};

async function step(name, fn) {
    try {
        await fn();
        passed++;
        console.log(`ok - ${name}`);
    } catch (err) {
        failed++;
        console.log(`FAIL: ${name}: ${err instanceof StepFailed ? err.message : err.stack || err}`);
        throw err;
    }
}

// A stateless (2026-07-28) tools/call through /mcp, as any MCP client would send it.
let nextId = 1;
async function callTool(name, args) {
    const body = {
        jsonrpc: "2.0", id: nextId++, method: "tools/call",
        params: {
            name, arguments: args || {},
            _meta: {
                "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                "io.modelcontextprotocol/clientCapabilities": {},
                "io.modelcontextprotocol/clientInfo": { name: "status-page-test", version: "1" },
            },
        },
    };
    const res = await fetch(`${BASE}/mcp`, {
        method: "POST",
        headers: {
            Authorization: `Bearer ${TOKEN}`, "Content-Type": "application/json",
            Accept: "application/json, text/event-stream", "MCP-Protocol-Version": "2026-07-28",
            "Mcp-Method": "tools/call", "Mcp-Name": name,
        },
        body: JSON.stringify(body),
        signal: AbortSignal.timeout(20000),
    });
    return { status: res.status, text: await res.text() };
}

async function main() {
    // launchServer rather than launch: its process() is the browser, whose pid run.sh
    // needs to kill it should node die before closing it.
    const server = await chromium.launchServer({ executablePath: env("CHROMIUM"), headless: true });
    if (process.env.CHROMIUM_PID_FILE) fs.writeFileSync(process.env.CHROMIUM_PID_FILE, String(server.process().pid));
    let browser = null;
    try {
        browser = await chromium.connect(server.wsEndpoint());
        await test(browser);
    } finally {
        if (browser) await browser.close().catch(() => {});
        await server.close().catch(() => {});
    }
}

async function test(browser) {
    const context = await browser.newContext({ viewport: { width: 1200, height: 520 } });
    page = await context.newPage();
    const pageErrors = [];
    const foreign = [];
    page.on("pageerror", (e) => pageErrors.push(String(e)));
    page.on("console", (m) => m.type() === "error" && !/401|Unauthorized/.test(m.text()) && pageErrors.push(m.text()));
    page.on("request", (r) => r.url().startsWith(BASE + "/") || foreign.push(r.url()));
    try {
        await run(page, pageErrors, foreign);
    } catch (err) {
        await dump();
        throw err;
    }
}

async function run(page, pageErrors, foreign) {
    await step("the page loads and asks for the token (the API answers 401 without it)", async () => {
        const res = await page.goto(BASE + "/");
        check(res && res.status() === 200, `GET / answered ${res && res.status()}`);
        check((res.headers()["content-type"] || "").startsWith("text/html"), `content-type ${res.headers()["content-type"]}`);
        await page.waitForSelector("#auth:not([hidden]) #token", { timeout: 10000 });
    });

    await step("a wrong token is rejected and the form stays", async () => {
        await page.fill("#token", "wrong-token-0123456789abcdef");
        await page.click("#token-submit");
        await page.waitForFunction(() => /rejected/.test(document.getElementById("auth-error").textContent), null, { timeout: 10000 });
        check(await page.isVisible("#auth"), "the token form is hidden");
    });

    await step("with the token both backends are listed online, live from /events", async () => {
        await page.fill("#token", TOKEN);
        await page.click("#token-submit");
        await page.waitForSelector("#auth[hidden]", { state: "attached", timeout: 10000 });
        for (const s of [CRASH, OTHER]) await page.waitForSelector(`${row(s)}[data-status="online"]`, { timeout: 20000 });
        await page.waitForSelector('body[data-connection="live"]', { timeout: 10000 });
        await page.waitForSelector('#events li[data-event="server_status_changed"]', { timeout: 10000 });
        const version = await page.textContent("#g-version");
        check(/\d+\.\d+/.test(version), `gateway version shown as ${JSON.stringify(version)}`);
        check((await page.$$("table#backends tbody tr[data-server]")).length >= 2, "fewer than two rows");
        const online = await page.$eval(`${row(OTHER)} .status .badge`, (e) => getComputedStyle(e).backgroundColor);
        check(online === "rgb(26, 127, 55)", `online badge colour ${online}, want green`);
        const token = await page.evaluate((t) => document.documentElement.outerHTML.includes(t), TOKEN);
        check(!token, "the token appears in the page's HTML");
    });

    await step("calls show up in the calls column and the latency sparkline", async () => {
        for (let i = 0; i < 6; i++) {
            for (const s of [OTHER, CRASH]) {
                const { status, text } = await callTool(`${s}__echo`, { text: `ping ${i}` });
                let echoed;
                try { echoed = JSON.parse(text).result.content[0].text; } catch { echoed = undefined; }
                check(status === 200 && echoed === `ping ${i}`, `${s}__echo answered ${status}: ${text}`);
            }
        }
        // A new call is noticed by the 5 s poll at the latest.
        await page.waitForFunction(
            (sel) => document.querySelectorAll(`${sel} svg.spark polyline.p50`).length === 1 && /^[1-9]/.test(document.querySelector(`${sel} td.calls`).textContent),
            row(OTHER), { timeout: 15000 });
    });

    await step("at 1200 px the table fits, every row's actions visible; the last hour is drawn", async () => {
        const wrap = await page.$eval(".table-wrap", (e) => [e.scrollWidth, e.clientWidth]);
        check(wrap[0] <= wrap[1], `the table overflows: ${wrap[0]} px in ${wrap[1]} px`);
        for (const s of [CRASH, OTHER]) {
            const box = await page.$eval(`${row(s)} button[data-action="logs"]`, (e) => e.getBoundingClientRect().toJSON());
            check(box.right <= 1200 && box.width > 0, `${s}'s Logs button ends at ${box.right} px`);
        }
        // The timeline: online time in green columns; the sparkline: p50 and p99.
        await page.waitForSelector(`${row(OTHER)} svg.timeline rect.c-online`, { timeout: 10000 });
        const label = await page.getAttribute(`${row(OTHER)} svg.timeline`, "aria-label");
        check(/^last hour: .*online/.test(label || ""), `timeline label ${JSON.stringify(label)}`);
        check(await page.$(`${row(OTHER)} svg.spark polyline.p99`) !== null, "no p99 line");
        const legend = await page.textContent("#legend");
        check(/degraded/.test(legend) && /failed/.test(legend), `legend ${JSON.stringify(legend)}`);
    });

    await step(`crashing ${CRASH} (its crash tool, through /mcp) takes its row out of online`, async () => {
        const { status, text } = await callTool(`${CRASH}__crash`);
        check(status < 500, `POST /mcp answered ${status}: ${text}`);
        await page.waitForSelector(`${row(CRASH)}:not([data-status="online"])`, { timeout: 15000 });
        const state = await page.getAttribute(row(CRASH), "data-status");
        check(["error", "offline", "restarting", "permanently_failed", "connecting"].includes(state), `status ${state}`);
        await page.waitForFunction((sel) => /code 3/.test(document.querySelector(`${sel} td.error`).textContent), row(CRASH), { timeout: 10000 });
        const full = await page.getAttribute(`${row(CRASH)} td.error span`, "title");
        check(/crash/.test(full || ""), `last error's full text on hover: ${JSON.stringify(full)}`);
        check(await page.getAttribute(row(OTHER), "data-status") === "online", `${OTHER} left online too`);
        // The current minute of its timeline shows the time out of online (within a poll).
        await page.waitForSelector(`${row(CRASH)} svg.timeline g[data-ago="0"] rect:is(.c-offline, .c-starting, .c-failed)`, { timeout: 15000 });
        await page.waitForSelector(`#events li[data-event="server_status_changed"][data-server="${CRASH}"]`, { timeout: 10000 });
    });

    await step("the next retry counts down between fetches", async () => {
        const read = () => page.$eval(`${row(CRASH)} span.retry`, (e) => e.textContent);
        const first = await read();
        check(/^\d+ s$/.test(first), `next retry shows ${JSON.stringify(first)}`);
        await page.waitForFunction(
            ([sel, v]) => { const t = document.querySelector(`${sel} span.retry`).textContent; return /^\d+ s$/.test(t) && parseInt(t, 10) < v; },
            [row(CRASH), parseInt(first, 10)], { timeout: 5000 });
        const colour = await page.$eval(`${row(CRASH)} .status .badge`, (e) => getComputedStyle(e).backgroundColor);
        check(colour !== "rgb(26, 127, 55)", "a crashed backend's badge is still green");
        fs.mkdirSync(OUT, { recursive: true });
        await page.screenshot({ path: path.join(OUT, "status-page.png"), fullPage: true });
    });

    await step(`Logs (GET /logs/${CRASH}) shows what the crashed backend wrote and went through`, async () => {
        await page.click(`${row(CRASH)} button[data-action="logs"]`);
        await page.waitForSelector("#logs:not([hidden])", { timeout: 10000 });
        const text = await page.$eval("#log-lines", (e) => e.textContent);
        check(/stderr/.test(text) && /crash/.test(text), `its stderr is shown: ${JSON.stringify(text.slice(0, 400))}`);
        check(/server_status_changed/.test(text), `its events are shown: ${JSON.stringify(text.slice(0, 400))}`);
    });

    await step(`Restart (POST /admin/restart/${CRASH}) brings it back online`, async () => {
        await page.click(`${row(CRASH)} button[data-action="restart"]`);
        await page.waitForFunction(() => /accepted/.test(document.getElementById("message").textContent), null, { timeout: 10000 });
        await page.waitForSelector(`${row(CRASH)}[data-status="online"]`, { timeout: 20000 });
        await page.waitForSelector(`#events li[data-event="server_status_changed"][data-server="${CRASH}"]`, { timeout: 10000 });
        await page.screenshot({ path: path.join(OUT, "status-page-recovered.png"), fullPage: true });
    });

    await step("Reconnect is accepted too", async () => {
        await page.evaluate(() => { document.getElementById("message").textContent = ""; });
        await page.click(`${row(OTHER)} button[data-action="reconnect"]`);
        await page.waitForFunction(() => /accepted/.test(document.getElementById("message").textContent), null, { timeout: 10000 });
        await page.waitForSelector(`${row(OTHER)}[data-status="online"]`, { timeout: 20000 });
    });

    await step("after a reload the token is still known (sessionStorage): no prompt, rows online", async () => {
        await page.reload();
        await page.waitForSelector(`${row(OTHER)}[data-status="online"]`, { timeout: 15000 });
        check(!(await page.isVisible("#auth")), "the token form is shown again");
        await page.waitForSelector('body[data-connection="live"]', { timeout: 10000 });
    });

    if (MODE === "fake") {
        await step("the event stream reconnects after it drops (fake only)", async () => {
            const before = pageErrors.length;
            const res = await fetch(`${BASE}/__fake/drop-events`, { method: "POST", headers: { Authorization: `Bearer ${TOKEN}` } });
            check(res.ok, `drop-events answered ${res.status}`);
            await page.waitForSelector('body[data-connection="reconnecting"]', { timeout: 10000 });
            await page.waitForSelector('body[data-connection="live"]', { timeout: 10000 });
            await page.click(`${row(CRASH)} button[data-action="restart"]`);
            await page.waitForSelector(`#events li[data-event="tools_discovered"][data-server="${CRASH}"]`, { timeout: 10000 });
            // Chromium logs the broken stream itself; that one is expected.
            const rest = pageErrors.splice(before).filter((e) => !/ERR_INCOMPLETE_CHUNKED_ENCODING/.test(e));
            pageErrors.push(...rest);
        });
    }

    await step("no script errors, and nothing fetched from anywhere else", async () => {
        check(pageErrors.length === 0, `errors: ${pageErrors.join(" | ")}`);
        check(foreign.length === 0, `requests elsewhere: ${foreign.join(" ")}`);
    });
}

async function dump() {
    if (!page) return;
    try {
        const text = await page.evaluate(() => document.body.innerText);
        const table = await page.evaluate(() => document.getElementById("backends").outerHTML);
        console.log("---- page text ----\n" + text + "\n---- table HTML ----\n" + table + "\n----");
        fs.mkdirSync(OUT, { recursive: true });
        await page.screenshot({ path: path.join(OUT, "status-page-failure.png"), fullPage: true });
        console.log(`(screenshot of the failure: ${path.join(OUT, "status-page-failure.png")})`);
    } catch (e) {
        console.log(`(could not read the page: ${e.message})`);
    }
}

const overall = setTimeout(() => {
    console.log("FAIL: the browser test took more than 180 s");
    console.log(`browser: ${passed} passed, ${failed + 1} failed`);
    process.exit(1);
}, 180000);

main()
    .catch(async (err) => {
        if (!(err instanceof StepFailed) && failed === 0) {
            failed++;
            console.log(`FAIL: ${err.stack || err}`);
        }
    })
    .finally(() => {
        clearTimeout(overall);
        console.log(`browser: ${passed} passed, ${failed} failed`);
        // Exit even if something (a browser that would not close) keeps the loop alive.
        process.exit(failed ? 1 : 0);
    });
