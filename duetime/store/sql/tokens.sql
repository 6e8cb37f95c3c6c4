-- REST API bearer tokens (duetime/api_tokens.py, docs/api.md "Authentication"): only hashes.

-- name: api_tokens_insert
INSERT INTO api_tokens (token_id, tenant, admin, token_sha256, name)
VALUES (:token_id, :tenant, :admin, :token_sha256, :name)
RETURNING token_id, tenant, admin, name, created_at, revoked_at;

-- name: api_tokens_get
-- The token a request names, if it is not revoked; the caller compares the hash.
SELECT token_id, tenant, admin, token_sha256
FROM api_tokens
WHERE token_id = :token_id AND revoked_at IS NULL;

-- name: api_tokens_revoke
UPDATE api_tokens SET revoked_at = now()
WHERE token_id = :token_id AND revoked_at IS NULL
RETURNING token_id;

-- name: api_tokens_list
SELECT token_id, tenant, admin, name, created_at, revoked_at
FROM api_tokens
WHERE (CAST(:tenant AS text) IS NULL OR tenant = :tenant)
ORDER BY created_at, token_id;
