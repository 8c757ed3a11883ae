// Remotes: S3 locations a registry partition names, and the checkpoints
// pushed to, pulled from and adopted through them. Exported from the
// package's `./workspace` subpath (re-exported by ./workspace.ts).
import {
  argv,
  bounds,
  duration,
  operands,
  operandsOf,
  registry,
  runCommand,
  runWorkspaceCommand,
  type BoundOptions,
  type CommandOptions,
  type RegistryOptions,
  type WorkspaceJSON,
} from "./command.js";

// A remote names an S3 location (s3://BUCKET[/PREFIX]) of a registry
// partition. The CLI stores no credentials: a command that reaches the remote
// takes them from the standard AWS chain of its environment
// (AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, AWS_PROFILE, …) — pass `env`.

/** `stow-s3 remote <verb…>`: a top-level command, not under `workspace`. */
function runRemoteCommand(args: string[], options: CommandOptions): Promise<WorkspaceJSON> {
  return runCommand([], ["remote", ...args], options);
}

export interface AddRemoteOptions extends RegistryOptions {
  /** The service's endpoint (the CLI's default: `AWS_ENDPOINT_URL`, else AWS). */
  endpointUrl?: string;
  region?: string;
  /** A profile of the shared AWS config/credentials files. */
  profile?: string;
}

/** `remote add NAME URL`: name an S3 location (`url` is `s3://BUCKET[/PREFIX]`). `addRemote(name, url, options)` or `addRemote({name, url, …})`. */
export function addRemote(name: string, url: string, options?: AddRemoteOptions): Promise<WorkspaceJSON>;
export function addRemote(request: AddRemoteOptions & { name: string; url: string }): Promise<WorkspaceJSON>;
export async function addRemote(...call: unknown[]): Promise<WorkspaceJSON> {
  const { values, options } = operandsOf<AddRemoteOptions>("addRemote", call, [
    ["name", true],
    ["url", true],
  ]);
  const [name, url] = [values.name!, values.url!];
  return runRemoteCommand(
    [
      ...argv(
        ["add"],
        [["--endpoint-url", options.endpointUrl], ["--region", options.region], ["--profile", options.profile], ...registry(options)],
      ),
      ...operands(name, url),
    ],
    options,
  );
}

/** `remote list`: the partition's remotes. */
export async function listRemotes(options: RegistryOptions = {}): Promise<WorkspaceJSON> {
  return runRemoteCommand(argv(["list"], registry(options)), options);
}

/** `remote remove NAME`: forget a remote (nothing on the remote is touched). `removeRemote(name, options)` or `removeRemote({name, …})`. */
export function removeRemote(name: string, options?: RegistryOptions): Promise<WorkspaceJSON>;
export function removeRemote(request: RegistryOptions & { name: string }): Promise<WorkspaceJSON>;
export async function removeRemote(...call: unknown[]): Promise<WorkspaceJSON> {
  const { values, options } = operandsOf<RegistryOptions>("removeRemote", call, [["name", true]]);
  return runRemoteCommand([...argv(["remove"], registry(options)), ...operands(values.name!)], options);
}

export interface RemoteTrafficOptions extends RegistryOptions {
  /** Overall deadline: `"90s"`, `"10m"`, or seconds (the CLI's default: 30 minutes). */
  timeout?: string | number;
}

/**
 * `remote-list --remote` (as `remote checkpoints NAME`): the checkpoints a remote holds.
 * `listRemoteCheckpoints(remote, options)` or `listRemoteCheckpoints({remote, …})`.
 */
export function listRemoteCheckpoints(remote: string, options?: RemoteTrafficOptions): Promise<WorkspaceJSON>;
export function listRemoteCheckpoints(request: RemoteTrafficOptions & { remote: string }): Promise<WorkspaceJSON>;
export async function listRemoteCheckpoints(...call: unknown[]): Promise<WorkspaceJSON> {
  const { values, options } = operandsOf<RemoteTrafficOptions>("listRemoteCheckpoints", call, [["remote", true]]);
  return runWorkspaceCommand(
    argv(["remote-list", "--remote", values.remote!], [["--timeout", duration(options.timeout)], ...registry(options)]),
    options,
  );
}

export interface PushOptions extends RemoteTrafficOptions {
  /** Push a checkpoint holding sensitive-looking paths (.env, keys). */
  includeSensitive?: boolean;
}

/**
 * `push --checkpoint-id --remote`: upload the blobs the remote lacks, then the manifest.
 * `pushWorkspaceCheckpoint(checkpointId, remote, options)` or `pushWorkspaceCheckpoint({checkpointId, remote, …})`.
 */
export function pushWorkspaceCheckpoint(checkpointId: string, remote: string, options?: PushOptions): Promise<WorkspaceJSON>;
export function pushWorkspaceCheckpoint(request: PushOptions & { checkpointId: string; remote: string }): Promise<WorkspaceJSON>;
export async function pushWorkspaceCheckpoint(...call: unknown[]): Promise<WorkspaceJSON> {
  const { values, options } = operandsOf<PushOptions>("pushWorkspaceCheckpoint", call, [
    ["checkpointId", true],
    ["remote", true],
  ]);
  return runWorkspaceCommand(
    argv(
      ["push", "--checkpoint-id", values.checkpointId!, "--remote", values.remote!],
      [["--timeout", duration(options.timeout)], ["--include-sensitive", options.includeSensitive], ...registry(options)],
    ),
    options,
  );
}

export interface PullOptions extends RemoteTrafficOptions, BoundOptions {
  includeSensitive?: boolean;
}

/**
 * `pull --checkpoint-id --remote`: download a remote checkpoint, verified before it is published.
 * `pullWorkspaceCheckpoint(checkpointId, remote, options)` or `pullWorkspaceCheckpoint({checkpointId, remote, …})`.
 */
export function pullWorkspaceCheckpoint(checkpointId: string, remote: string, options?: PullOptions): Promise<WorkspaceJSON>;
export function pullWorkspaceCheckpoint(request: PullOptions & { checkpointId: string; remote: string }): Promise<WorkspaceJSON>;
export async function pullWorkspaceCheckpoint(...call: unknown[]): Promise<WorkspaceJSON> {
  const { values, options } = operandsOf<PullOptions>("pullWorkspaceCheckpoint", call, [
    ["checkpointId", true],
    ["remote", true],
  ]);
  return runWorkspaceCommand(
    argv(
      ["pull", "--checkpoint-id", values.checkpointId!, "--remote", values.remote!],
      [
        ["--timeout", duration(options.timeout)],
        ...bounds(options),
        ["--include-sensitive", options.includeSensitive],
        ...registry(options),
      ],
    ),
    options,
  );
}

export interface AdoptRemoteOptions extends PullOptions {
  remote: string;
  checkpointId: string;
  /** The new root (must not exist; its parent must). */
  root: string;
}

/**
 * `adopt --remote --checkpoint-id --root`: pull a remote checkpoint and restore it as a new, adopted workspace.
 * `adoptWorkspaceRemote({remote, checkpointId, root, …})` or `adoptWorkspaceRemote(checkpointId, remote, root, options)`
 * (the order of {@link pullWorkspaceCheckpoint}).
 */
export function adoptWorkspaceRemote(options: AdoptRemoteOptions): Promise<WorkspaceJSON>;
export function adoptWorkspaceRemote(
  checkpointId: string,
  remote: string,
  root: string,
  options?: Omit<AdoptRemoteOptions, "checkpointId" | "remote" | "root">,
): Promise<WorkspaceJSON>;
export async function adoptWorkspaceRemote(...call: unknown[]): Promise<WorkspaceJSON> {
  const { values, options } = operandsOf<AdoptRemoteOptions>("adoptWorkspaceRemote", call, [
    ["checkpointId", true],
    ["remote", true],
    ["root", true],
  ]);
  return runWorkspaceCommand(
    argv(
      ["adopt", "--remote", values.remote!, "--checkpoint-id", values.checkpointId!, "--root", values.root!],
      [
        ["--timeout", duration(options.timeout)],
        ...bounds(options),
        ["--include-sensitive", options.includeSensitive],
        ...registry(options),
      ],
    ),
    options,
  );
}
