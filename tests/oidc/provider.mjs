// The OpenID provider of apiagg's end-to-end tests: npm's oidc-provider (a certified OpenID
// provider) over HTTPS on loopback, issuing JWT access tokens with the client_credentials grant.
// tests/src/oidc.rs starts it; by hand (after `npm ci` here):
//
//   node provider.mjs --cert server.crt --key server.key --jwks keys.json --clients clients.json \
//     [--port 0 | --listen-fd FD] [--issuer-path /realms/test] [--token-ttl 300]
//
// --cert, --key     the serving certificate and its key (PEM files)
// --jwks            {"keys": [private JWK, ...]}: the first key signs every token, all of them are
//                   published (public parts) at the jwks_uri; each key names its `kid` and `alg`
//                   (RS256, PS256, ES256; without `alg`, RS256 for RSA and ES256 for P-256)
// --clients         [{"client_id", "client_secret", "claims": {...}}, ...]: each client stands for
//                   one user, its `claims` are added to each of its access tokens (a `sub` among
//                   them replaces the default, the client_id)
// --port            the port on 127.0.0.1 (0, the default: any free one)
// --listen-fd       listen on this inherited socket instead (bound, not yet listening: how the
//                   harness starts it on a port it holds)
// --issuer-path     the provider is mounted under this path, part of the issuer
// --token-ttl       access token lifetime in seconds (default 300)
//
// Its first stdout line is `listening on https://127.0.0.1:PORT` (the harness's convention);
// nothing else is ever written to stdout (a reader may have closed it), logs go to stderr.
//
// Tokens: POST {issuer}/token with client_secret_basic (or client_secret_post),
// grant_type=client_credentials and resource=R gives a JWT access token (header typ at+jwt) whose
// `aud` is R. R must be an absolute URI (the provider's rule): `urn:apiagg-test:audience:A`, with A
// percent-encoded, gives `aud` A, so that any audience string can be asked for.

import * as fs from 'node:fs';
import * as https from 'node:https';
import { parseArgs } from 'node:util';

// oidc-provider prints its notices with console.info: to stderr, as all logs.
console.info = console.error;
console.log = console.error;

const AUDIENCE_PREFIX = 'urn:apiagg-test:audience:';

const { values: args } = parseArgs({
  options: {
    cert: { type: 'string' },
    key: { type: 'string' },
    jwks: { type: 'string' },
    clients: { type: 'string' },
    port: { type: 'string', default: '0' },
    'listen-fd': { type: 'string' },
    'issuer-path': { type: 'string', default: '' },
    'token-ttl': { type: 'string', default: '300' },
  },
  strict: true,
});

function fail(message) {
  console.error(`provider.mjs: ${message}`);
  process.exit(2);
}

for (const name of ['cert', 'key', 'jwks', 'clients']) {
  if (!args[name]) fail(`--${name} is required`);
}
const tokenTtl = Number(args['token-ttl']);
if (!Number.isInteger(tokenTtl) || tokenTtl <= 0) fail('--token-ttl must be a positive integer (seconds)');
let mountPath = args['issuer-path'];
if (mountPath.endsWith('/')) mountPath = mountPath.slice(0, -1);
if (mountPath && !mountPath.startsWith('/')) fail('--issuer-path must start with /');

const jwks = JSON.parse(fs.readFileSync(args.jwks, 'utf8'));
if (!Array.isArray(jwks.keys) || jwks.keys.length === 0) fail('--jwks needs at least one key');
const signingKey = jwks.keys[0];
const signingAlg = signingKey.alg ?? (signingKey.kty === 'RSA' ? 'RS256' : 'ES256');

const clientList = JSON.parse(fs.readFileSync(args.clients, 'utf8'));
if (!Array.isArray(clientList)) fail('--clients must hold a JSON array');
const claimsOf = new Map(clientList.map((c) => [c.client_id, c.claims ?? {}]));

// Loaded after console.info is redirected (it prints a warning on Node 20, "Unsupported runtime",
// on stderr: it works there all the same).
const { default: Provider } = await import('oidc-provider');

function audienceOf(resource) {
  return resource.startsWith(AUDIENCE_PREFIX)
    ? decodeURIComponent(resource.slice(AUDIENCE_PREFIX.length))
    : resource;
}

const configuration = {
  clients: clientList.map((c) => ({
    client_id: c.client_id,
    client_secret: c.client_secret,
    redirect_uris: [],
  })),
  jwks,
  // Clients are checked against the keys when first used: their ID Token algorithm (unused
  // here) must be one the keys can sign with.
  clientDefaults: {
    grant_types: ['client_credentials'],
    id_token_signed_response_alg: signingAlg,
    response_types: [],
    token_endpoint_auth_method: 'client_secret_basic',
  },
  features: {
    clientCredentials: { enabled: true },
    devInteractions: { enabled: false },
    introspection: { enabled: true },
    resourceIndicators: {
      enabled: true,
      defaultResource: async () => undefined,
      useGrantedResource: async () => false,
      // Any resource is a resource server whose tokens are JWTs signed by the first key.
      getResourceServerInfo: async (_ctx, resource) => ({
        scope: '',
        audience: audienceOf(resource),
        accessTokenTTL: tokenTtl,
        accessTokenFormat: 'jwt',
        jwt: { sign: { alg: signingAlg, kid: signingKey.kid } },
      }),
    },
  },
  // Claims the provider sets itself (iss, aud, exp, iat, jti, client_id, scope) win over these.
  extraTokenClaims: async (_ctx, token) => {
    const { sub, ...claims } = claimsOf.get(token.clientId) ?? {};
    return claims;
  },
  formats: {
    customizers: {
      jwt: async (_ctx, token, jwt) => {
        const sub = claimsOf.get(token.clientId)?.sub;
        if (sub !== undefined) jwt.payload.sub = sub;
      },
    },
  },
  ttl: {
    AccessToken: tokenTtl,
    ClientCredentials: tokenTtl,
  },
  // Cookies are for interactive logins, which this provider has none of.
  cookies: { keys: ['apiagg-tests-cookie-key'] },
  enabledJWA: {
    idTokenSigningAlgValues: ['RS256', 'PS256', 'ES256'],
  },
  clockTolerance: 0,
  renderError: async (ctx, out) => {
    ctx.type = 'json';
    ctx.body = out;
  },
};

const server = https.createServer({
  cert: fs.readFileSync(args.cert),
  key: fs.readFileSync(args.key),
});

function listen() {
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    if (args['listen-fd'] !== undefined) {
      server.listen({ fd: Number(args['listen-fd']) }, resolve);
    } else {
      server.listen({ port: Number(args.port), host: '127.0.0.1' }, resolve);
    }
  });
}

try {
  await listen();
} catch (e) {
  fail(`cannot listen: ${e.message}`);
}
const { port } = server.address();
const origin = `https://127.0.0.1:${port}`;
const issuer = `${origin}${mountPath}`;

let provider;
try {
  provider = new Provider(issuer, configuration);
} catch (e) {
  fail(`bad configuration: ${e.stack}`);
}
provider.on('server_error', (_ctx, error) => console.error('server_error', error));
const callback = provider.callback();

server.on('request', (req, res) => {
  const path = req.url.split('?')[0];
  if (mountPath && path !== mountPath && !path.startsWith(`${mountPath}/`)) {
    res.writeHead(404, { 'content-type': 'application/json' });
    res.end('{"error":"not_found"}');
    return;
  }
  if (mountPath) {
    // As express mounts an app: the provider sees the path below the mount point.
    req.originalUrl = req.url;
    req.url = req.url.slice(mountPath.length) || '/';
    if (req.url.startsWith('?')) req.url = `/${req.url}`;
  }
  callback(req, res);
});

console.error(`oidc-provider: issuer ${issuer}, signing key ${signingKey.kid} (${signingAlg}), `
  + `${jwks.keys.length} published, ${clientList.length} clients, token lifetime ${tokenTtl}s`);
process.stdout.write(`listening on ${origin}\n`);

for (const signal of ['SIGTERM', 'SIGINT']) {
  process.on(signal, () => process.exit(0));
}
