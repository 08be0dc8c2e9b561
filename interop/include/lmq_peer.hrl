%% Records of LMQ's Mnesia tables (docs/lmq-contract.md#tables). Field names and
%% order are the wire contract: a pylmq node reads and writes these tuples by rpc.

%% One row of a queue table (ordered_set keyed by id).
%%   id      {UnixSecondsFloat, Uuid16Bytes}; ts of an available message is when
%%           it became available, of a processing one its deadline, of an accum
%%           one the end of its window
%%   state   available | processing | accum
%%   type    normal | compound
%%   retry   deliveries still allowed: integer or infinity
%%   content {Metadata, Body} (normal) or a list of them (compound)
-record(message, {id, state = available, type = normal, retry = 0, content}).

%% One row per queue in '__lmq_queue_info__': the queue's own props.
-record(queue_info, {name, props}).

%% Cluster-wide settings in '__lmq_info__' (default_props lives here).
-record(lmq_info, {key, value}).

-define(LMQ_INFO_TABLE, '__lmq_info__').
-define(QUEUE_INFO_TABLE, '__lmq_queue_info__').

%% What a queue gets when neither it nor a default pattern says otherwise;
%% accum in milliseconds, timeout in seconds.
-define(SYSTEM_PROPS, [{accum, 0}, {retry, 2}, {timeout, 30}]).
