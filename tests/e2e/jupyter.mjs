// A real JupyterLab for the notebook's tests and benchmark: started from target/py (where
// `make test` installs the package's wheel) on 127.0.0.1 with a token, in a folder of its own
// holding the notebook given, its settings apart from the user's; `expose_app_in_browser` lets a
// test run the notebook's cells by JupyterLab's own command.
import { spawn } from 'node:child_process';
import { mkdtempSync, writeFileSync, rmSync, mkdirSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { freePort, ROOT } from './harness.mjs';

export const PY = path.join(ROOT, 'target/py');

/** A notebook (nbformat 4) of cells: a string of Python each, or `{ markdown }`. */
export function notebook(cells) {
  return {
    nbformat: 4, nbformat_minor: 5,
    metadata: { kernelspec: { name: 'python3', display_name: 'Python 3', language: 'python' } },
    cells: cells.map((source, i) => (typeof source === 'string'
      ? { cell_type: 'code', id: `cell-${i}`, metadata: {}, execution_count: null, outputs: [], source }
      : { cell_type: 'markdown', id: `cell-${i}`, metadata: {}, source: source.markdown })),
  };
}

/** JupyterLab serving `files` (name → text) from a new folder: `{ url(name), work, env, stop }`. */
export async function startLab(files) {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'attnscope-nb-'));
  const work = path.join(dir, 'work');
  mkdirSync(work);
  for (const [name, text] of Object.entries(files)) writeFileSync(path.join(work, name), text);
  // no prompt to fetch Jupyter's news, and no check for updates
  const settings = path.join(dir, 'settings/@jupyterlab/apputils-extension');
  mkdirSync(settings, { recursive: true });
  writeFileSync(path.join(settings, 'notification.jupyterlab-settings'), JSON.stringify({ fetchNews: 'false', checkForUpdates: false }));
  const env = {
    ...process.env,
    PATH: `${PY}/bin:${process.env.PATH}`,
    JUPYTER_CONFIG_DIR: path.join(dir, 'config'),
    JUPYTER_RUNTIME_DIR: path.join(dir, 'runtime'),
    JUPYTERLAB_SETTINGS_DIR: path.join(dir, 'settings'),
    JUPYTERLAB_WORKSPACES_DIR: path.join(dir, 'workspaces'),
    IPYTHONDIR: path.join(dir, 'ipython'),
    JUPYTER_PLATFORM_DIRS: '1',
  };
  const token = `t${Math.random().toString(36).slice(2)}`;
  const port = freePort();
  const lab = spawn(path.join(PY, 'bin/jupyter'), [
    'lab', '--no-browser', '--ServerApp.ip=127.0.0.1', `--ServerApp.port=${port}`, '--ServerApp.port_retries=0',
    `--IdentityProvider.token=${token}`, `--ServerApp.root_dir=${work}`,
    '--LabApp.expose_app_in_browser=True', '--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate',
    '--LabApp.extension_manager=readonly', ...(process.getuid?.() === 0 ? ['--allow-root'] : []),
  ], { env, stdio: ['ignore', 'pipe', 'pipe'] });
  let log = '';
  lab.stdout.on('data', (d) => { log += d; });
  lab.stderr.on('data', (d) => { log += d; });
  const stop = () => { lab.kill('SIGTERM'); rmSync(dir, { recursive: true, force: true }); };
  for (let i = 0; ; i++) {
    try { if ((await fetch(`http://127.0.0.1:${port}/api/status?token=${token}`)).ok) break; } catch {}
    if (i > 600 || lab.exitCode !== null) { stop(); throw new Error(`JupyterLab did not start:\n${log}`); }
    await new Promise((r) => setTimeout(r, 100));
  }
  return { url: (name) => `http://127.0.0.1:${port}/lab/tree/${name}?token=${token}`, work, env, stop, log: () => log };
}

/** Aborts (and lists in the array returned) every request of `page` that leaves the machine. */
export async function onlyLocal(page) {
  const outside = [];
  await page.route('**', (r) => {
    const u = new URL(r.request().url());
    if (u.hostname === '127.0.0.1' || ['blob:', 'data:', 'file:'].includes(u.protocol)) return r.continue();
    outside.push(u.href);
    return r.abort();
  });
  return outside;
}

/** Opens the notebook `name` in JupyterLab and runs all its cells once its kernel is ready, or
 *  those above cell `before` (which is left the active cell); returns once they have run, or
 *  with `wait: false` once they are queued (a cell that waits for the test). */
export async function runNotebook(page, lab, name, before = null, { wait = true } = {}) {
  await page.goto(lab.url(name));
  await page.waitForFunction(() => window.jupyterapp?.shell?.currentWidget?.sessionContext?.session?.kernel, null, { timeout: 120000 });
  await page.evaluate(async ({ before, wait }) => {
    const nb = window.jupyterapp.shell.currentWidget;
    await nb.sessionContext.ready;
    if (before !== null) nb.content.activeCellIndex = before;
    const ran = window.jupyterapp.commands.execute(before === null ? 'notebook:run-all-cells' : 'notebook:run-all-above');
    if (wait) await ran;
  }, { before, wait });
}
