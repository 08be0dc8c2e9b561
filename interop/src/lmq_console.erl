%% Cluster membership of the interop test peer, after lmq-admin's
%% join / leave / status and LMQ's lmq_console:add_new_node/1.
%%
%% add_new_node/1 runs on a node already in the cluster, on behalf of a node
%% that wants in. An Erlang node running Mnesia becomes a db node with a RAM
%% copy of every table, as in LMQ. A node without Mnesia (a hidden pylmq node)
%% cannot hold copies: it only goes into the lmq_event broadcast list of every
%% running db node, so it hears queue_created / queue_deleted / new_message.
%% Real LMQ has no such branch; a pylmq node joining real LMQ announces itself
%% with {join_node, Node} to each node's lmq_event instead.
-module(lmq_console).

-export([add_new_node/1, join/1, leave/0, leave/1, status/0]).

%% How long to wait for a joining node to say whether it runs Mnesia.
-define(PROBE_TIMEOUT, 5000).

add_new_node(Node) when is_atom(Node) ->
    case rpc:call(Node, mnesia, system_info, [is_running], ?PROBE_TIMEOUT) of
        yes -> add_db_node(Node);
        _NoMnesia -> add_event_node(Node)
    end.

add_db_node(Node) ->
    case mnesia:change_config(extra_db_nodes, [Node]) of
        {ok, [Node]} -> copy_all_tables(Node);
        {ok, []} -> {error, {not_connected, Node}};
        {error, _} = Error -> Error
    end.

copy_all_tables(Node) ->
    Failed = lists:filtermap(fun(Table) ->
        case mnesia:add_table_copy(Table, Node, ram_copies) of
            {atomic, ok} -> false;
            {aborted, {already_exists, _, _}} -> false;
            {aborted, Reason} -> {true, {Table, Reason}}
        end
    end, mnesia:system_info(tables)),
    case Failed of
        [] -> ok;
        _ -> {error, {copy_failed, Failed}}
    end.

%% Synchronous, so that once this returns every running node broadcasts to Node.
add_event_node(Node) ->
    lists:foreach(fun(DbNode) ->
        catch gen_event:sync_notify({lmq_event, DbNode}, {remote, {join_node, Node}})
    end, mnesia:system_info(running_db_nodes)),
    ok.

%% Joins the cluster Node belongs to, as `lmq-admin join Node` does: this
%% node's Mnesia data is dropped, Node adds this node, and the local services
%% restart (lmq_event then announces this node to every running db node).
join([NodeString]) when is_list(NodeString) ->
    join(list_to_atom(NodeString));
join(Node) when is_atom(Node) ->
    case net_adm:ping(Node) of
        pong ->
            ok = lmq_peer:stop_services(),
            ok = reset_mnesia(),
            Result = rpc:call(Node, lmq_console, add_new_node, [node()]),
            ok = lmq_peer:start_services(),
            Result;
        pang ->
            {error, not_reachable}
    end.

%% Leaves the cluster, as `lmq-admin leave` does: one running node drops this
%% node from the schema, and this node starts over alone. Other nodes keep it
%% in their broadcast lists, as in LMQ.
leave() ->
    leave([]).

leave([]) ->
    Others = [N || N <- mnesia:system_info(running_db_nodes), N =/= node()],
    ok = lmq_peer:stop_services(),
    stopped = mnesia:stop(),
    Result = drop_from(Others),
    ok = mnesia:delete_schema([node()]),
    ok = mnesia:start(),
    ok = lmq_peer:start_services(),
    Result.

drop_from([]) ->
    ok;
drop_from([Node | Rest]) ->
    case rpc:call(Node, mnesia, del_table_copy, [schema, node()]) of
        {atomic, ok} -> ok;
        Error when Rest =:= [] -> {error, Error};
        _ -> drop_from(Rest)
    end.

reset_mnesia() ->
    stopped = mnesia:stop(),
    ok = mnesia:delete_schema([node()]),
    mnesia:start().

%% What `lmq-admin status` shows, as data: Mnesia's view of the cluster, this
%% node's broadcast list (event_nodes, a peer addition: it lists non-Mnesia
%% members too) and per queue size, memory in bytes, nodes and props.
status() ->
    WordSize = erlang:system_info(wordsize),
    Queue = fun(Name) ->
        {Name, [{size, mnesia:table_info(Name, size)},
                {memory, mnesia:table_info(Name, memory) * WordSize},
                {nodes, mnesia:table_info(Name, where_to_write)},
                {props, lmq_lib:get_properties(Name)}]}
    end,
    [{active_nodes, lists:sort(mnesia:system_info(running_db_nodes))},
     {all_nodes, lists:sort(mnesia:system_info(db_nodes))},
     {event_nodes, lists:sort(lmq_event:nodes())},
     {queues, [Queue(N) || N <- lists:sort(lmq_lib:all_queue_names())]}].
