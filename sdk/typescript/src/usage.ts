// Usage: the options of getUsage and listUsage, and the requests they make.
import { create } from "@bufbuild/protobuf";
import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import type { Owner } from "./client.js";
import * as pb from "./gen/execution/v1/execution_pb.js";
import { MAX_USAGE_PAGE_SIZE } from "./limits.js";

/** A usage granularity by name: "HOUR", "DAY" (UTC days) or "TOTAL" (one window: the whole range). */
export type UsageGranularityName = Exclude<keyof typeof pb.UsageGranularity, "UNSPECIFIED">;

/** A usage grouping by name: "ENVIRONMENT", "BINDING", "OWNER", "CLIENT" or "NONE" (everything summed). */
export type UsageGroupByName = Exclude<keyof typeof pb.UsageGroupBy, "UNSPECIFIED">;

/** The windows of getUsage; none asks for every kept hour of the current incarnation. */
export interface UsageOptions {
  /** The incarnation (the current one when unset); a deleted environment's ledger is kept for the retention period and named by its revision. */
  revision?: string;
  /** The range, [start, end), cut by the server to whole windows; unset: the oldest kept window, and now. */
  start?: Date;
  end?: Date;
  /** The windows' width (default HOUR); a name or a UsageGranularity value. */
  granularity?: UsageGranularityName | pb.UsageGranularity;
}

/** Selects and groups what listUsage sums; none sums every kept hour of the client's environments, by environment. */
export interface ListUsageOptions {
  /** Only the environments this client created for this owner (the client must be allowed to attest owners). */
  owner?: Owner;
  /** Only this binding's environments. */
  bindingId?: string;
  /** Administrators: another client's environments (its identity, a URI SAN), or allClients every client they administer; not both. */
  client?: string;
  allClients?: boolean;
  /** The range, [start, end), cut by the server to whole windows; unset: the oldest kept window, and now. */
  start?: Date;
  end?: Date;
  /** The windows' width (default HOUR). */
  granularity?: UsageGranularityName | pb.UsageGranularity;
  /** The records' key (default ENVIRONMENT); a record carries the key fields of its grouping. */
  groupBy?: UsageGroupByName | pb.UsageGroupBy;
  /** The server's page (0: its default of 500; at most 1000). */
  pageSize?: number;
}

/** @internal GetUsage's request, refused here when out of bounds. */
export function getUsageRequest(environmentId: string, o: UsageOptions): pb.GetUsageRequest {
  return create(pb.GetUsageRequestSchema, {
    environment: { id: environmentId, revision: o.revision ?? "" }, ...range(o.start, o.end),
    granularity: enumValue(pb.UsageGranularity, "granularity", o.granularity),
  });
}

/** @internal ListUsage's first request, refused here when out of bounds. */
export function listUsageRequest(o: ListUsageOptions): pb.ListUsageRequest {
  const pageSize = o.pageSize ?? 0;
  if (!Number.isInteger(pageSize) || pageSize < 0 || pageSize > MAX_USAGE_PAGE_SIZE) throw new RangeError(`page size ${pageSize}: want 0..${MAX_USAGE_PAGE_SIZE}`);
  if (o.client && o.allClients) throw new RangeError("client and allClients exclude each other");
  return create(pb.ListUsageRequestSchema, {
    owner: o.owner ? create(pb.OwnerSchema, o.owner) : undefined, bindingId: o.bindingId ?? "", client: o.client ?? "",
    allClients: o.allClients ?? false, ...range(o.start, o.end), granularity: enumValue(pb.UsageGranularity, "granularity", o.granularity),
    groupBy: enumValue(pb.UsageGroupBy, "groupBy", o.groupBy), pageSize,
  });
}

function range(start: Date | undefined, end: Date | undefined) {
  for (const [name, d] of [["start", start], ["end", end]] as const) {
    if (d !== undefined && !(d instanceof Date && Number.isFinite(d.getTime()))) throw new RangeError(`${name} ${String(d)}: not a valid Date`);
  }
  if (start && end && end.getTime() <= start.getTime()) throw new RangeError(`end ${end.toISOString()} is not after start ${start.toISOString()}`);
  return { start: start && timestampFromDate(start), end: end && timestampFromDate(end) };
}

/** A generated enum's value from its name or itself; undefined is UNSPECIFIED (the server's default). */
function enumValue<E extends Record<string, string | number>>(e: E, name: string, v: string | number | undefined): number {
  if (v === undefined) return 0;
  const n = typeof v === "string" && v !== "UNSPECIFIED" ? e[v] : v;
  if (typeof n !== "number" || e[n] === undefined) throw new RangeError(`${name} ${String(v)}: not a name or value of the enum`);
  return n;
}
