// A real OpenID provider for the sign-in tests: panva's `oidc-provider` with its
// development interactions (a login form where any login and any password work, then a
// consent page), on http://127.0.0.1:<port>.
//
// Environment:
//   OIDC_PROVIDER_HOME   folder where tests/oidc/install.sh installed oidc-provider (required)
//   OIDC_PORT            port to listen on; 0 or unset = any free port
//   OIDC_CLIENT_ID       the one confidential client (client_secret_basic, code flow + PKCE)
//   OIDC_CLIENT_SECRET
//   OIDC_REDIRECT_URIS   its redirect URIs, space- or comma-separated (Streamlit's end in
//                        /oauth2callback); also allowed as post-logout redirect URIs
//   OIDC_GROUPS          JSON map login → groups, e.g. {"ops@example.com": ["oncall"]}
//
// Claims: `sub` and `email` are the login typed, `email_verified` is true, `name` is the
// part before "@", `groups` comes from OIDC_GROUPS (empty list otherwise). Scopes: openid,
// email (email, email_verified), profile (name, groups), groups (groups). The claims are
// put in the ID token too (conformIdTokenClaims: false), because that is where Streamlit's
// Authlib client reads st.user from.
//
// Prints one JSON line {"issuer": "http://127.0.0.1:<port>"} on stdout once it listens.

import { createServer } from 'node:http';
import { createRequire } from 'node:module';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';

function required(name) {
  const value = process.env[name];
  if (!value) {
    console.error(`provider.mjs: ${name} is not set`);
    process.exit(2);
  }
  return value;
}

const home = required('OIDC_PROVIDER_HOME');
const clientId = required('OIDC_CLIENT_ID');
const clientSecret = required('OIDC_CLIENT_SECRET');
const redirectUris = required('OIDC_REDIRECT_URIS').split(/[\s,]+/).filter(Boolean);
const groups = JSON.parse(process.env.OIDC_GROUPS || '{}');

// oidc-provider lives outside the repo (see install.sh): resolve it from there.
const entry = createRequire(join(home, 'package.json')).resolve('oidc-provider');
const { default: Provider } = await import(pathToFileURL(entry).href);

const server = createServer();
server.listen(Number(process.env.OIDC_PORT || 0), '127.0.0.1', () => {
  const issuer = `http://127.0.0.1:${server.address().port}`;
  const provider = new Provider(issuer, {
    clients: [
      {
        client_id: clientId,
        client_secret: clientSecret,
        redirect_uris: redirectUris,
        post_logout_redirect_uris: redirectUris,
        grant_types: ['authorization_code'],
        response_types: ['code'],
        token_endpoint_auth_method: 'client_secret_basic',
      },
    ],
    // PKCE for every client, confidential ones included (S256 is the only method listed).
    pkce: { required: () => true },
    claims: {
      openid: ['sub'],
      email: ['email', 'email_verified'],
      profile: ['name', 'groups'],
      groups: ['groups'],
    },
    conformIdTokenClaims: false,
    async findAccount(_ctx, login) {
      return {
        accountId: login,
        async claims() {
          return {
            sub: login,
            email: login,
            email_verified: true,
            name: login.split('@')[0],
            groups: groups[login] ?? [],
          };
        },
      };
    },
    cookies: { keys: ['outbox-monitor-tests-only-cookie-key'] },
    features: { devInteractions: { enabled: true } },
    // The sign-in the tests complete: no refresh tokens, short-lived everything.
    ttl: { AccessToken: 600, AuthorizationCode: 60, IdToken: 600, Interaction: 600, Session: 600, Grant: 600 },
  });
  server.on('request', provider.callback());
  console.log(JSON.stringify({ issuer }));
});

for (const signal of ['SIGTERM', 'SIGINT']) {
  process.on(signal, () => process.exit(0));
}
