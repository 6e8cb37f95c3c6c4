-- REST API bearer tokens (docs/api.md, "Authentication"). Only a token's SHA-256 is stored: the
-- token itself is printed once, when it is created. A token belongs to one tenant, or is an
-- admin token (every tenant, and the operator's endpoints). A revoked token stays as a record.
CREATE TABLE api_tokens (
    token_id     text PRIMARY KEY CHECK (token_id ~ '^[a-z0-9]{12}$'),
    tenant       text CHECK (tenant ~ '^[a-z0-9][a-z0-9_-]{0,62}$'),
    admin        boolean NOT NULL DEFAULT false,
    token_sha256 bytea NOT NULL CHECK (length(token_sha256) = 32),
    name         text NOT NULL DEFAULT '' CHECK (length(name) <= 200),
    created_at   timestamptz NOT NULL DEFAULT now(),
    revoked_at   timestamptz,
    CONSTRAINT api_tokens_scope CHECK (admin = (tenant IS NULL))
);
