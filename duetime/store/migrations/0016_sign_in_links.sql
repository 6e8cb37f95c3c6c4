-- One-time dashboard sign-in links (docs/dashboard.md, "Signing in"). `duetime up` prints a
-- link whose code is exchanged once, before it expires, for a session token of the same scope
-- as the token the link was made for. Only the code's SHA-256 is stored; a used or expired link
-- stays as a record (when it was used, and which session token it became).
CREATE TABLE sign_in_links (
    code_sha256      bytea PRIMARY KEY CHECK (length(code_sha256) = 32),
    token_id         text NOT NULL REFERENCES api_tokens (token_id),
    created_at       timestamptz NOT NULL DEFAULT now(),
    expires_at       timestamptz NOT NULL,
    used_at          timestamptz,
    session_token_id text REFERENCES api_tokens (token_id),
    CONSTRAINT sign_in_links_expiry CHECK (expires_at > created_at),
    CONSTRAINT sign_in_links_session CHECK ((used_at IS NULL) = (session_token_id IS NULL))
);
