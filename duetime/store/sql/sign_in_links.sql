-- One-time dashboard sign-in links (duetime/store/sign_in_links.py): only the code's hash.

-- name: sign_in_links_insert
INSERT INTO sign_in_links (code_sha256, token_id, expires_at)
VALUES (:code_sha256, :token_id, now() + :valid_for)
RETURNING expires_at;

-- name: sign_in_links_claim
-- Takes the link if it is unused, unexpired and its token is not revoked; the row lock makes a
-- second, concurrent use wait and then find used_at set.
SELECT l.token_id, t.tenant, t.admin
FROM sign_in_links l
JOIN api_tokens t ON t.token_id = l.token_id
WHERE l.code_sha256 = :code_sha256
  AND l.used_at IS NULL
  AND l.expires_at > now()
  AND t.revoked_at IS NULL
FOR UPDATE OF l;

-- name: sign_in_links_mark_used
UPDATE sign_in_links SET used_at = now(), session_token_id = :session_token_id
WHERE code_sha256 = :code_sha256 AND used_at IS NULL
RETURNING code_sha256;

-- name: sign_in_links_get
-- Why a link was refused: used, expired, or its token revoked (no row: unknown).
SELECT l.used_at IS NOT NULL AS used, l.expires_at <= now() AS expired,
       t.revoked_at IS NOT NULL AS revoked
FROM sign_in_links l
JOIN api_tokens t ON t.token_id = l.token_id
WHERE l.code_sha256 = :code_sha256;
