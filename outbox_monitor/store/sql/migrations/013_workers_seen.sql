-- The workers as the outbox shows them (issue 15 item 7). A row loses locked_by at its ack
-- (SPEC section 1), so the table alone cannot say when a worker last claimed or acked: the
-- sampler remembers what each of its passes saw, one row per worker (locked_by), upserted
-- every pass. Nothing here is written by the workers' claim or ack.
--   rows_in_hand, stuck   its processing rows at the last pass, and those stuck (SPEC 2)
--   ids_in_hand           the ids of those rows (the newest 1,000): at the next pass, a row
--                         no longer processing under this locked_by was let go of; found done,
--                         it was acked at its processed_at
--   first_seen, last_seen the first and the last pass that saw it holding rows
--   last_claim_at         the newest locked_at seen among its rows
--   last_ack_at           the newest processed_at of a row seen in its hand, found done
--   acks_seen             rows seen in its hand later found done; dead_lettered_seen found
--                         failed; returned_seen found pending again (a retry or a reap) or
--                         gone (pruned), without their time
--   updated_at            the last pass that wrote the row
-- A row not seen holding anything for the samples' retention is deleted by the sampler.
CREATE TABLE outbox_monitor.workers_seen (
    table_name         text NOT NULL,
    locked_by          text NOT NULL,
    rows_in_hand       integer NOT NULL,
    stuck              integer NOT NULL,
    ids_in_hand        bigint[] NOT NULL DEFAULT '{}',
    first_seen         timestamptz NOT NULL,
    last_seen          timestamptz NOT NULL,
    last_claim_at      timestamptz,
    last_ack_at        timestamptz,
    acks_seen          bigint NOT NULL DEFAULT 0,
    dead_lettered_seen bigint NOT NULL DEFAULT 0,
    returned_seen      bigint NOT NULL DEFAULT 0,
    updated_at         timestamptz NOT NULL,
    PRIMARY KEY (table_name, locked_by)
);
