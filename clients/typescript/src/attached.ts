// Attached workspaces: a directory you already have (a git checkout, say)
// registered as a workspace in place (`attach`), its checkpoints (`log`),
// the tree against one (`status`), put back to one (`rewind`) and forgotten
// (`detach`). Exported from the package's `./workspace` subpath.
import { argv, registry, runWorkspaceCommand, type RegistryOptions, type WorkspaceJSON } from "./command.js";

export interface AttachOptions extends RegistryOptions {
  /** The directory to attach (default: `cwd`, else the current directory). */
  root?: string;
  /** Informational: attached workspaces are never collected. */
  ttlSeconds?: number;
  /** The bucket view's byte quota (default 64 MiB). */
  maxBytes?: number;
  /** The bucket view's object quota (default 10,000). */
  maxObjects?: number;
  /** Captures keep what git ignores too. */
  noGitignore?: boolean;
}

/**
 * `attach [--root]`: register an existing directory as a workspace in place
 * (nothing is copied; only `ROOT/.stow` is written). Resolves with the
 * prepare-shaped result (`workspace_id`, `bucket`, `root`, `base_identity`, …).
 * A refusal throws {@link WorkspaceCommandError} with a stable `code`:
 * `invalid_root`, `already_exists` (the message names the workspace),
 * `refused` (`/`, the home directory, inside or containing a workspace, the
 * registry) or `capacity_exceeded`.
 */
export async function attachWorkspace(options: AttachOptions = {}): Promise<WorkspaceJSON> {
  return runWorkspaceCommand(
    argv(
      ["attach"],
      [
        ["--root", options.root],
        ["--ttl-seconds", options.ttlSeconds],
        ["--max-bytes", options.maxBytes],
        ["--max-objects", options.maxObjects],
        ["--no-gitignore", options.noGitignore],
        ...registry(options),
      ],
    ),
    options,
  );
}

export interface DetachOptions extends RegistryOptions {
  /** The workspace (default: the one holding `cwd`). */
  id?: string;
  /** Keep its checkpoints in the registry. */
  keepCheckpoints?: boolean;
}

/**
 * `detach [--id]`: forget an attached workspace (its record, its `.stow` and,
 * unless `keepCheckpoints`, its checkpoints); nothing else in its tree is
 * touched. A prepared workspace is refused (`refused`: use {@link destroyWorkspace}).
 */
export async function detachWorkspace(options: DetachOptions = {}): Promise<WorkspaceJSON> {
  return runWorkspaceCommand(
    argv(["detach"], [["--id", options.id], ["--keep-checkpoints", options.keepCheckpoints], ...registry(options)]),
    options,
  );
}

export interface LogOptions extends RegistryOptions {
  /** The workspace (default: the one holding `cwd`). */
  id?: string;
  /** Checkpoints per page (1 to 1000; the CLI's default is 50). */
  limit?: number;
  /** The `next_cursor` of the previous page (of the same workspace's log). */
  cursor?: string;
}

/**
 * `log [--id]`: one page of the workspace's checkpoints, newest first:
 * `{version, workspace_id, head?, checkpoints: [{checkpoint_id, parent_id?,
 * created, files, bytes, message?, origin, head}], next_cursor?}`. A cursor
 * from another workspace's log is refused (`invalid_request`).
 */
export async function workspaceLog(options: LogOptions = {}): Promise<WorkspaceJSON> {
  return runWorkspaceCommand(
    argv(["log"], [["--id", options.id], ["--limit", options.limit], ["--cursor", options.cursor], ...registry(options)]),
    options,
  );
}

export interface StatusOptions extends RegistryOptions {
  /** The workspace (default: the one holding `cwd`). */
  id?: string;
  /** Compare with this checkpoint instead of the head. */
  against?: string;
}

/**
 * `status [--id] [--against]`: the live tree against a checkpoint (default:
 * the head), as `diff`'s changes, with `clean` and counts; each change's
 * `kind` is one of `added`, `deleted`, `modified`, `mode_changed`,
 * `type_changed`. Changes nothing.
 */
export async function workspaceStatus(options: StatusOptions = {}): Promise<WorkspaceJSON> {
  return runWorkspaceCommand(
    argv(["status"], [["--id", options.id], ["--against", options.against], ...registry(options)]),
    options,
  );
}

export interface RewindOptions extends RegistryOptions {
  /** The checkpoint to put the tree back to. */
  to: string;
  /** The workspace (default: the one holding `cwd`). */
  id?: string;
  /** Only these files or directories (relative to the root); the head then stays on the undo checkpoint. */
  paths?: readonly string[];
  /** Return the plan (with `status`'s `changes` and `links`) and change nothing. */
  dryRun?: boolean;
  /** The undo checkpoint's message (the CLI's default: "before rewind to CP"). */
  message?: string;
  /** The same key and inputs answer the first rewind's result (`replayed: true`) instead of rewinding again. */
  requestKey?: string;
}

/**
 * `rewind --to [--id] [--paths] [--dry-run]`: put the live tree back to a
 * checkpoint in place. The tree is captured first (the undo checkpoint:
 * rewind to `undo_checkpoint_id` to undo) and only what differs is written.
 * Resolves with `{version, workspace_id, checkpoint_id, undo_checkpoint_id,
 * head, dry_run, paths?, written, deleted, unchanged, conflicts: [], replayed}`
 * (a dry run has no `undo_checkpoint_id` and adds `changes`, `links`).
 *
 * As a failed keyed checkpoint does, a rewind that left paths alone because
 * they changed meanwhile (the CLI exits 1) throws {@link WorkspaceCommandError}
 * with `code` `workspace_changed` and the result (its `conflicts: [{path,
 * reason}]` and counts) as its `document`; everything else was rewound.
 * Refusals throw it with the CLI's code (`not_found`, `invalid_path`,
 * `in_progress`, …).
 */
export async function rewindWorkspace(options: RewindOptions): Promise<WorkspaceJSON> {
  if (options.paths !== undefined && options.paths.length === 0) {
    throw new RangeError("paths must name at least one file or directory (leave it out to rewind the whole tree)");
  }
  return runWorkspaceCommand(
    [
      ...argv(
        ["rewind", "--to", options.to],
        [
          ["--id", options.id],
          ["--dry-run", options.dryRun],
          ["--message", options.message],
          ["--request-key", options.requestKey],
          ...registry(options),
        ],
      ),
      // `--paths=P`: a path starting with `-` is not taken for a flag.
      ...(options.paths ?? []).map((p) => `--paths=${p}`),
    ],
    options,
  );
}
