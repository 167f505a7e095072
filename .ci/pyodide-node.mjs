// One exercise notebook in a fresh Pyodide under Node.js, offline (called by .ci/pyodide.py run).
//   node .ci/pyodide-node.mjs RUNTIME_DIR SPEC.json
// RUNTIME_DIR: the indexURL (npm's runtime files and the verified wheels, nothing else).
// SPEC: {packages, wheels, driver, ...}: the Pyodide packages the notebook's install cell names,
// the site's wheels (installed with micropip, deps=False, from the in-memory file system), and
// the Python run once they are installed; its JSON result is printed as "PYODIDE-RESULT {...}".
// Any attempt to reach the network (fetch, the only way Pyodide loads a URL under Node) fails.
import { readFileSync } from "node:fs";
import { basename, resolve } from "node:path";
import { pathToFileURL } from "node:url";

const [runtimeDir, specFile] = process.argv.slice(2);
const indexURL = resolve(runtimeDir) + "/";
const spec = JSON.parse(readFileSync(specFile, "utf8"));

const tried = [];
globalThis.fetch = async (url) => {
  tried.push(String(url));
  throw new Error(`offline: fetch(${url}) refused`);
};

const t0 = performance.now();
const log = [];
const { loadPyodide } = await import(pathToFileURL(indexURL + "pyodide.mjs").href);
const py = await loadPyodide({
  indexURL,
  stdout: (s) => log.push(s),
  stderr: (s) => log.push(s),
});
const started = performance.now();
await py.loadPackage(["micropip", ...spec.packages], { messageCallback: (s) => log.push(s) });
py.FS.mkdirTree("/site-wheels");
const urls = spec.wheels.map((w) => {
  py.FS.writeFile(`/site-wheels/${basename(w)}`, readFileSync(w));
  return `emfs:/site-wheels/${basename(w)}`;
});
py.globals.set("SITE_WHEELS", py.toPy(urls));
await py.runPythonAsync("import micropip\nawait micropip.install(SITE_WHEELS, deps=False)");
const installed = performance.now();
py.globals.set("SPEC", JSON.stringify(spec));
const out = await py.runPythonAsync(spec.driver);
const result = JSON.parse(out);
result.seconds = {
  boot: (started - t0) / 1000,
  install: (installed - started) / 1000,
  run: (performance.now() - installed) / 1000,
};
result.pyodide = py.version;
if (tried.length) {
  console.error(`pyodide-node: the runtime tried the network: ${tried.join(", ")}`);
  console.error(log.join("\n"));
  process.exit(1);
}
console.log("PYODIDE-RESULT " + JSON.stringify(result));
