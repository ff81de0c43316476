/**
 * Where the suite's packages come from. The tests install them outside the source tree
 * (`npm ci` into target/tmp, see tests/e2e/mcp_typescript.rs) and name that directory in
 * `DSH_MCP_TS_PACKAGES`; loaded with `node --import ./tests/mcp-ts/resolve-packages.mjs`,
 * this module registers a resolve hook that looks bare specifiers (`@modelcontextprotocol/sdk/...`)
 * up from there. Without the variable it does nothing, and packages come from a
 * `node_modules` beside package.json (`npm ci` in tests/mcp-ts, by hand).
 */

import { register } from 'node:module';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { isMainThread } from 'node:worker_threads';

/** A file URL in the install directory: bare specifiers resolve as if imported there. */
let installed;

/** Hook: gets the install directory from `register`. */
export function initialize(data) {
  installed = data.installed;
}

/** Hook: a bare specifier imported from outside the install directory resolves from it. */
export async function resolve(specifier, context, nextResolve) {
  const bare = !/^(\.|\/|[a-z][a-z0-9+.-]*:)/i.test(specifier);
  const fromOutside = !context.parentURL?.startsWith(new URL('.', installed ?? 'file:///').href);
  if (installed && bare && fromOutside) {
    return nextResolve(specifier, { ...context, parentURL: installed });
  }
  return nextResolve(specifier, context);
}

// On the main thread (not the hooks' own), register this module's hooks.
if (isMainThread && process.env.DSH_MCP_TS_PACKAGES) {
  const installedUrl = pathToFileURL(join(process.env.DSH_MCP_TS_PACKAGES, 'package.json')).href;
  register(import.meta.url, { data: { installed: installedUrl } });
}
