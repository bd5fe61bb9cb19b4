package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // database/sql driver "pgx"
	_ "modernc.org/sqlite"             // database/sql driver "sqlite", pure Go
)

// ErrStale reports a write refused by the fence column: a holder with a
// larger fence wrote the row first, so this holder's lock had ended, whether
// it noticed or not.
var ErrStale = errors.New("dbtx: stale fence: the row was written under a newer lock")

// Store is the protected resource: one table of stock rows, each with the
// largest fence that wrote it.
type Store struct {
	db      *sql.DB
	kind    string // "sqlite" or "postgres"
	cleanup func() // after Close: the temporary directory of a SQLite file
}

// schema works on both databases: BIGINT is an integer column in SQLite
// too, and a fence (µs of Redis server time and up) needs 64 bits.
const schema = `CREATE TABLE IF NOT EXISTS stock (
	id    TEXT PRIMARY KEY,
	qty   BIGINT NOT NULL,
	fence BIGINT NOT NULL DEFAULT 0
)`

// OpenSQLite opens (and creates) the SQLite database file path in WAL mode,
// so that readers never wait for the writer, with a busy timeout, so that a
// writer waits for the one before it instead of failing at once with
// SQLITE_BUSY. Isolation is what SQLite gives: one writer at a time,
// every transaction serializable.
func OpenSQLite(path string) (*Store, error) {
	dsn := "file:" + filepath.ToSlash(path) + "?_pragma=journal_mode(WAL)&_pragma=busy_timeout(10000)"
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		return nil, err
	}
	return newStore(db, "sqlite")
}

// OpenPostgres opens a PostgreSQL database through pgx's database/sql
// driver, at PostgreSQL's default isolation, READ COMMITTED.
func OpenPostgres(dsn string) (*Store, error) {
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		return nil, err
	}
	return newStore(db, "postgres")
}

func newStore(db *sql.DB, kind string) (*Store, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := db.ExecContext(ctx, schema); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("%s: create table stock: %w", kind, err)
	}
	return &Store{db: db, kind: kind}, nil
}

// Kind is "sqlite" or "postgres".
func (s *Store) Kind() string { return s.kind }

// DB is the store's connection pool.
func (s *Store) DB() *sql.DB { return s.db }

// Close closes the connection pool.
func (s *Store) Close() error {
	err := s.db.Close()
	if s.cleanup != nil {
		s.cleanup()
	}
	return err
}

// Reset puts the row id at qty with fence 0.
func (s *Store) Reset(ctx context.Context, id string, qty int64) error {
	_, err := s.db.ExecContext(ctx,
		`INSERT INTO stock (id, qty, fence) VALUES ($1, $2, 0)
		 ON CONFLICT (id) DO UPDATE SET qty = excluded.qty, fence = 0`, id, qty)
	return err
}

// Qty returns the row's committed quantity.
func (s *Store) Qty(ctx context.Context, id string) (int64, error) {
	var qty int64
	err := s.db.QueryRowContext(ctx, `SELECT qty FROM stock WHERE id = $1`, id).Scan(&qty)
	return qty, err
}

// Read returns the quantity as the holder sees it when it starts its
// read-modify-write.
//
// On PostgreSQL the read is a statement of tx: at READ COMMITTED it sees
// the rows committed before it, and the UPDATE later waits for a writer
// that has not committed, then overwrites its row. That is the lost update
// the lock is there to prevent.
//
// On SQLite the read goes through the pool, in a statement of its own, as a
// repository method taking *sql.DB (or a cache, or another service) reads.
// A read inside tx would not show the bug the lock prevents: SQLite's
// transactions are serializable, so a transaction whose read went stale
// fails its write (SQLITE_BUSY, or SQLITE_BUSY_SNAPSHOT) instead of
// overwriting; TestSQLiteReadInTxFailsInsteadOfLosing shows it. A read
// outside it has no such protection: only the lock orders it after the
// previous holder's commit.
func (s *Store) Read(ctx context.Context, tx *sql.Tx, id string) (int64, error) {
	var row *sql.Row
	if s.kind == "sqlite" {
		row = s.db.QueryRowContext(ctx, `SELECT qty FROM stock WHERE id = $1`, id)
	} else {
		row = tx.QueryRowContext(ctx, `SELECT qty FROM stock WHERE id = $1`, id)
	}
	var qty int64
	err := row.Scan(&qty)
	return qty, err
}

// Write sets the row's quantity inside tx, fenced: the row keeps the largest
// fence that wrote it, and a write with a fence not above it changes nothing
// and returns ErrStale. The caller rolls back then.
func (s *Store) Write(ctx context.Context, tx *sql.Tx, id string, qty, fence int64) error {
	res, err := tx.ExecContext(ctx,
		`UPDATE stock SET qty = $1, fence = $2 WHERE id = $3 AND fence < $2`, qty, fence, id)
	if err != nil {
		return err
	}
	n, err := res.RowsAffected()
	if err != nil {
		return err
	}
	if n == 0 {
		return fmt.Errorf("%w (fence %d, row %q)", ErrStale, fence, id)
	}
	return nil
}
