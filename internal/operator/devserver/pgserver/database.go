package pgserver

import (
	"context"
	"fmt"
	"net/url"

	"github.com/jackc/pgx/v5"
)

// CreateDatabase creates database name on the server at adminURL (from
// template, if not empty) and returns a URL for it with the same
// credentials and parameters. Names are the caller's constants or random
// hex, never user input; they are quoted all the same.
func CreateDatabase(ctx context.Context, adminURL, name, template string) (string, error) {
	sql := "CREATE DATABASE " + pgx.Identifier{name}.Sanitize()
	if template != "" {
		sql += " TEMPLATE " + pgx.Identifier{template}.Sanitize()
	}
	if err := adminExec(ctx, adminURL, sql); err != nil {
		return "", fmt.Errorf("create database %s: %w", name, err)
	}
	return WithDatabase(adminURL, name)
}

// DropDatabase drops name, disconnecting its sessions.
func DropDatabase(ctx context.Context, adminURL, name string) error {
	return adminExec(ctx, adminURL, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)")
}

// WithDatabase returns raw with its database name replaced, keeping
// credentials and parameters.
func WithDatabase(raw, name string) (string, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return "", fmt.Errorf("parse database URL: %w", err)
	}
	u.Path = "/" + name
	return u.String(), nil
}

func adminExec(ctx context.Context, adminURL, sql string) error {
	conn, err := Connect(ctx, adminURL)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	_, err = conn.Exec(ctx, sql)
	return err
}
