#!/usr/bin/env bash
# The reference: seed 000's Steps 1-6 (x-internal-story-resume) in bash + jq, as the
# seed describes them, for benchmarks and as a test oracle. Same flags, envelope and
# exit codes as `storyd resume` in mtime mode. Reads under `flock -s`, like the seed.
set -u
usage() { echo "usage: --story-id <id> --epic-id <id>" >&2; exit 64; }
command -v jq >/dev/null 2>&1 || { echo "dependency missing: jq" >&2; exit 127; }

story_id="" epic_id="" workspace="."
while [ $# -gt 0 ]; do
  case $1 in
    --story-id) [ $# -ge 2 ] || usage; story_id=$2; shift 2 ;;
    --story-id=*) story_id=${1#*=}; shift ;;
    --epic-id) [ $# -ge 2 ] || usage; epic_id=$2; shift 2 ;;
    --epic-id=*) epic_id=${1#*=}; shift ;;
    --workspace) [ $# -ge 2 ] || usage; workspace=$2; shift 2 ;;
    --workspace=*) workspace=${1#*=}; shift ;;
    *) echo "unknown flag $1" >&2; usage ;;
  esac
done
[ -n "$story_id" ] && [ -n "$epic_id" ] || usage
story_id=${story_id,,}
[[ $story_id =~ ^story-[0-9]{4}-[0-9]{4}$ ]] || usage
[[ $epic_id =~ ^[0-9]+$ ]] || usage
[ ${#epic_id} -lt 4 ] && epic_id=$(printf '%04d' "$((10#$epic_id))")

epic_dir="$workspace/plans/epic-${epic_id}"
story_file="${epic_dir}/${story_id}.md"
state_file="${epic_dir}/execution-state.json"
[ -f "$state_file" ] || { echo "execution-state.json not found" >&2; exit 1; }

# Step 2: the story node, read under the writers' shared lock.
story_node=$(flock -s "$state_file" jq -c --arg id "$story_id" '.stories[$id] // empty' "$state_file") || exit 65
[ -n "$story_node" ] || { echo "Story not in execution-state.json" >&2; exit 2; }

# Step 3: classify each task in insertion order (jq's keys_unsorted).
US=$'\x1f'
done_ids=() done_times=() tasks_pending=() positions=() pos=0 first_pending=0
while IFS="$US" read -r -d $'\x1e' id status completed; do
  pos=$((pos + 1))
  case ${status,,} in
    done|merged|complete|concluída|concluida)
      done_ids+=("$id"); done_times+=("$completed") ;;
    pending|in_progress|pr_created|pr_approved|pr_merged|failed|blocked|unknown)
      tasks_pending+=("$id"); [ "$first_pending" -eq 0 ] && first_pending=$pos ;;
    *) echo "warn: unknown status '$status' for task $id; treated as PENDING" >&2
      tasks_pending+=("$id"); [ "$first_pending" -eq 0 ] && first_pending=$pos ;;
  esac
done < <(printf '%s' "$story_node" | jq -j '(.tasks // {}) | to_entries[] |
  [.key, ((.value.status // "PENDING") | if type == "string" then . else tojson end),
   (.value.completedAt // "" | tostring)] | join("\u001f") + "\u001e"')
tasks_completed=$(printf '%s' "$story_node" | jq -c '[(.tasks // {}) | to_entries[] |
  select((.value.status // "PENDING") | type == "string" and
    (ascii_downcase as $s | $s == "done" or $s == "merged" or $s == "complete"
      or $s == "concluída" or $s == "concluida")) |
  {id: .key, commitSha: (.value.commitSha // null)}]')
last_sha=$(printf '%s' "$tasks_completed" | jq -r '.[-1].commitSha // ""')

# Step 4: the resume point (position of the first task that is not DONE).
if [ ${#done_ids[@]} -eq 0 ]; then
  resume_point="fresh-start"
elif [ ${#tasks_pending[@]} -eq 0 ]; then
  resume_point="all-done"
else
  resume_point="phase-2-task-${first_pending}"
fi

# Step 5: staleness against the story file's mtime.
stale=()
story_mtime=$(stat -c '%Y' "$story_file" 2>/dev/null || echo 0)
if [ "$story_mtime" -ne 0 ] && [ ${#done_ids[@]} -gt 0 ]; then
  for i in "${!done_ids[@]}"; do
    t=${done_times[$i]}
    [ -n "$t" ] || continue
    epoch=$(date -d "$t" +%s 2>/dev/null) || continue
    [ "$epoch" -lt "$story_mtime" ] && stale+=("Story file modified after task ${done_ids[$i]} DONE")
  done
fi

# Step 6: the envelope, assembled by jq -nc.
json_strings() { jq -nc '$ARGS.positional' --args "$@"; }
jq -nc \
  --arg resumePoint "$resume_point" \
  --argjson tasksCompleted "$tasks_completed" \
  --argjson tasksPending "$(json_strings "${tasks_pending[@]}")" \
  --arg lastCommitSha "$last_sha" \
  --argjson staleWarnings "$(json_strings "${stale[@]}")" \
  '{resumePoint:$resumePoint, tasksCompleted:$tasksCompleted, tasksPending:$tasksPending,
    lastCommitSha:(if $lastCommitSha=="" then null else $lastCommitSha end),
    staleWarnings:$staleWarnings}'
